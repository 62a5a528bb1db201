"""nsys_columns.c, the big tables of an nsys SQLite export read in C into int64
columns, each table on its own read-only connection and (where there are cores for
it) its own thread, compiled on first use with the host C compiler and loaded
through cffi, as the other C helpers are; SQLite itself is the system's libsqlite3
(GPUOBS_SQLITE_LIB names another), loaded at run time. Where it cannot be built or
loaded (or GPUOBS_PURE_PYTHON=1), or where a read meets anything it does not take
(nsys_columns.c says what), nsys.py reads the file through Python's sqlite3: the
same rows, the same errors (tests)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from cffi import FFI

from ..errors import GpuobsError
from ..native_cache import compiled_library
from .text_pool import HEADER as TEXT_POOL_HEADER
from .text_pool import pooled_texts

SOURCE = Path(__file__).with_name("nsys_columns.c")
SQLITE_LIBRARY = "libsqlite3.so.0"
DONE, BAIL, INTERRUPTED = 0, 2, 3
ROWS, NVTX = 0, 1  # a job's mode (nsys_columns.c: NVTX reads NVTX_EVENTS' ranges and marks)
MAX_JOBS = 8
_FFI = FFI()
_FFI.cdef("""
typedef struct reader reader;
reader* nsys_open(const char* library, const char* uri, double seconds);
void nsys_close(reader* r);
int nsys_add(reader* r, const char* sql, int n_columns, const int64_t* columns, const int64_t* spec,
             const int64_t* keys);
int nsys_run(reader* r, int threads);
int64_t nsys_rows(reader* r, int i);
int nsys_fill_events(reader* r, int i, char* dest, int64_t itemsize, const int64_t* offsets, const int64_t* cols,
                     const int32_t* names, int64_t n_names, const int32_t* tracks, int64_t n_tracks,
                     const int32_t* texts, int64_t n_texts, int32_t category);
int nsys_fill_rows(reader* r, int i, char* dest, int64_t itemsize, int n, const int64_t* offsets,
                   const int64_t* cols, const int64_t* minus);
int nsys_remap(char* dest, int64_t itemsize, int64_t n, const int64_t* offsets, const int32_t* names, int64_t n_names,
               const int32_t* tracks, int64_t n_tracks, int64_t texts_base, int32_t category);
void nsys_release(reader* r, int i);
int nsys_sink(reader* r, int i, char* base, int64_t stride, int64_t cap, int out, int minus, int width);
void nsys_bounds(reader* r, int i, int64_t* min, int64_t* max);
int64_t nsys_key_count(reader* r, int i, int k);
const int64_t* nsys_keys(reader* r, int i, int k);
int64_t nsys_text_count(reader* r, int i);
const char* nsys_text_pool(reader* r, int i);
const int64_t* nsys_text_offsets(reader* r, int i);
""")


class ReadStopped(GpuobsError):
    """The C read met something it leaves to nsys.py's Python reading (caught there:
    never said to a user)."""


class ReadInterrupted(GpuobsError):
    """A query ran past its time budget (nsys.py says so, as for its own queries)."""


@lru_cache(maxsize=1)
def library():
    """The loaded helper, or None where it cannot be built or cached here."""
    return compiled_library(_FFI, "nsys-columns", SOURCE, (TEXT_POOL_HEADER,))


def threads() -> int:
    """Threads for a read: one per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Column:
    """A query's column: a whole number in [lo, hi] (NULL refused unless `nullable`,
    then read as `null_value`), or with `text` each distinct text's code in first-seen
    order (-1 for NULL). `out`: whether it is kept (else only checked)."""

    lo: int = 0
    hi: int = 0
    nullable: bool = False
    out: bool = True
    null_value: int = 0
    text: bool = False


TEXT = Column(text=True)


@dataclass(frozen=True)
class Key:
    """Rows' keys numbered in first-seen order: (column a, column b), or with b None
    (a's value, whether it is NULL). The job keeps each row's key's number."""

    a: int
    b: int | None = None


class Job:
    """One query's results, once the read is done: its kept columns (in order, then one
    per Key), written into numpy rows by fill_events and fill_rows; the least and
    greatest integer read in each column, keys and texts."""

    def __init__(self, reader: Reader, index: int, width: int, n_keys: int):
        self.reader, self.index, self.width, self.n_keys = reader, index, width, n_keys
        self._sinks: list = []  # the arrays C writes into, held while it may

    def sink(self, rows: np.ndarray, fields: dict) -> None:
        """Before the run: kept columns written by C straight into fields of `rows` (at
        most len(rows) of them, more stop the read), as fill_rows takes them ({field:
        column, or (column, less column), or (field, i): ... for item i of an array
        field}), int64 or int32 fields (a value past an int32 stops the read); those
        columns are then not kept in C (fill_rows and fill_events refuse them)."""
        if not rows.flags.c_contiguous or not rows.flags.writeable:
            raise ReadStopped
        for field, column in fields.items():
            name, item = field if isinstance(field, tuple) else (field, None)
            kind, offset = rows.dtype.fields[name][:2]
            base = kind.base if item is not None else kind
            if (
                base not in (np.dtype("<i8"), np.dtype("<i4"))
                or (item is None) != (kind.shape == ())
                or not 0 <= (item or 0) < kind.itemsize // base.itemsize
            ):
                raise TypeError(f"{field}: not an int64 or int32 field of {rows.dtype}")  # C writes these bytes
            column, less = column if isinstance(column, tuple) else (column, -1)
            at = rows.ctypes.data + offset + (item or 0) * base.itemsize
            ok = self.reader.lib.nsys_sink(
                self.reader.handle,
                self.index,
                _FFI.cast("char*", at),
                rows.itemsize,
                len(rows),
                column,
                less,
                base.itemsize,
            )
            if not ok:
                raise ReadStopped
        self._sinks.append(rows)

    @property
    def rows(self) -> int:
        return int(self.reader.lib.nsys_rows(self.reader.handle, self.index))

    def fill_events(
        self, events: np.ndarray, columns: tuple, names: np.ndarray, tracks: np.ndarray, texts, category: int
    ) -> None:
        """The rows into `events` (EVENT rows, as many as the job's): start and duration
        from `columns` (start, end, name key, track key, text or None), name the name
        key's code in `names` (or the text's in `texts` where a row has one), track the
        track key's code in `tracks`, and `category`."""
        fields = events.dtype.fields
        if len(events) != self.rows or not events.flags.c_contiguous:
            raise ReadStopped
        kinds = (("start_ns", "<i8"), ("dur_ns", "<i8"), ("track", "<i4"), ("name", "<i4"), ("category", "<i4"))
        if any(fields[field][0] != np.dtype(kind) for field, kind in kinds):
            raise TypeError(f"event rows of another layout: {events.dtype}")  # C writes these bytes
        offsets = np.array([fields[f][1] for f in ("start_ns", "dur_ns", "track", "name", "category")], np.int64)
        cols = np.array([*columns[:4], -1 if columns[4] is None else columns[4]], np.int64)
        names, tracks = np.ascontiguousarray(names, np.int32), np.ascontiguousarray(tracks, np.int32)
        texts = np.ascontiguousarray(np.zeros(0) if texts is None else texts, np.int32)
        ok = self.reader.lib.nsys_fill_events(
            self.reader.handle,
            self.index,
            _FFI.cast("char*", events.ctypes.data),
            events.itemsize,
            *(_FFI.cast("int64_t*", a.ctypes.data) for a in (offsets, cols)),
            *(x for a in (names, tracks, texts) for x in (_FFI.cast("int32_t*", a.ctypes.data), len(a))),
            category,
        )
        if not ok:
            raise ReadStopped

    def fill_rows(self, rows: np.ndarray, fields: dict) -> None:
        """int64 fields of `rows` (as many as the job's) from columns: {field: column, or
        (column, less column), or (field, i): ... for item i of an array field}."""
        if len(rows) != self.rows or not rows.flags.c_contiguous:
            raise ReadStopped
        offsets, cols, minus = [], [], []
        for field, column in fields.items():
            name, item = field if isinstance(field, tuple) else (field, None)
            kind, offset = rows.dtype.fields[name][:2]
            base = kind.base if item is not None else kind
            if (
                base != np.dtype("<i8")
                or (item is None) != (kind.shape == ())
                or not 0 <= (item or 0) < kind.itemsize // 8
            ):
                raise TypeError(f"{field}: not an int64 field of {rows.dtype}")  # C writes these bytes
            offsets.append(offset + (0 if item is None else item * 8))
            column, less = column if isinstance(column, tuple) else (column, -1)
            cols.append(column)
            minus.append(less)
        arrays = [np.array(a, np.int64) for a in (offsets, cols, minus)]
        ok = self.reader.lib.nsys_fill_rows(
            self.reader.handle,
            self.index,
            _FFI.cast("char*", rows.ctypes.data),
            rows.itemsize,
            len(cols),
            *(_FFI.cast("int64_t*", a.ctypes.data) for a in arrays),
        )
        if not ok:
            raise ReadStopped

    def release(self) -> None:
        """Lets go of the columns, keys and texts (read them first); the bounds stay."""
        self.reader.lib.nsys_release(self.reader.handle, self.index)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.empty(self.width, np.int64), np.empty(self.width, np.int64)
        self.reader.lib.nsys_bounds(
            self.reader.handle, self.index, _FFI.cast("int64_t*", lo.ctypes.data), _FFI.cast("int64_t*", hi.ctypes.data)
        )
        return lo, hi

    def keys(self, k: int) -> np.ndarray:
        """Key set k's keys, (count, 2) int64, by number."""
        lib, handle = self.reader.lib, self.reader.handle
        count = int(lib.nsys_key_count(handle, self.index, k))
        if not count:
            return np.zeros((0, 2), np.int64)
        data = _FFI.buffer(lib.nsys_keys(handle, self.index, k), count * 16)
        return np.frombuffer(data, np.int64).reshape(count, 2).copy()

    def texts(self) -> list[bytes]:
        lib, handle = self.reader.lib, self.reader.handle
        count = int(lib.nsys_text_count(handle, self.index))
        return pooled_texts(
            _FFI, count, lib.nsys_text_pool(handle, self.index), lib.nsys_text_offsets(handle, self.index)
        )


def remap(rows: np.ndarray, names: np.ndarray, tracks: np.ndarray, texts_base: int, category: int) -> None:
    """A job's EVENT rows as it sank them (key numbers; NVTX's text, or -1, in category),
    renumbered in place in one C pass: track = tracks[track], name = names[name] or,
    where texts_base >= 0 and a row has a text, texts_base + text; category. ReadStopped
    where a code is out of range (the Python reading then)."""
    fields = rows.dtype.fields
    if (
        not rows.flags.c_contiguous
        or not rows.flags.writeable
        or any(fields[f][0] != np.dtype("<i4") for f in ("track", "name", "category"))
    ):
        raise ReadStopped
    names, tracks = np.ascontiguousarray(names, np.int32), np.ascontiguousarray(tracks, np.int32)
    offsets = np.array([fields[f][1] for f in ("track", "name", "category")], np.int64)
    ok = library().nsys_remap(
        _FFI.cast("char*", rows.ctypes.data),
        rows.itemsize,
        len(rows),
        _FFI.cast("int64_t*", offsets.ctypes.data),
        _FFI.cast("int32_t*", names.ctypes.data),
        len(names),
        _FFI.cast("int32_t*", tracks.ctypes.data),
        len(tracks),
        texts_base,
        category,
    )
    if not ok:
        raise ReadStopped


class Reader:
    """The file through the C helper; None from open() where the helper or libsqlite3
    is not there, or SQLite cannot open the file."""

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle
        self.jobs: list[Job] = []

    @classmethod
    def open(cls, uri: str, seconds: float) -> Reader | None:
        lib = library()
        if lib is None:
            return None
        name = os.environ.get("GPUOBS_SQLITE_LIB") or SQLITE_LIBRARY
        handle = lib.nsys_open(name.encode(), uri.encode(), seconds)
        if handle == _FFI.NULL:
            return None
        return cls(lib, _FFI.gc(handle, lib.nsys_close))

    def add(self, query: str, columns: list, keys: tuple = (), mode: int = ROWS, ordered: tuple | None = None) -> Job:
        """A query to read: `columns` (Column each), `keys` (Key each), `ordered`: the
        (start, end) columns whose end may not come before the start where neither is
        NULL. With mode NVTX the columns begin eventType, globalTid, start, end."""
        spec, kept = [], 0
        for c in columns:
            spec += [int(c.text), int(c.nullable), c.lo, c.hi, kept if c.out else -1, c.null_value]
            kept += c.out
        key_spec = []
        for i, k in enumerate(keys):
            key_spec += [k.a, -1 if k.b is None else k.b, kept + i]
        start, end = ordered or (-1, -1)
        arrays = [
            np.array(spec, np.int64),
            np.array([mode, start, end, len(keys)], np.int64),
            np.array(key_spec or [0], np.int64),
        ]
        index = self.lib.nsys_add(
            self.handle, query.encode(), len(columns), *(_FFI.cast("int64_t*", a.ctypes.data) for a in arrays)
        )
        if index < 0:
            raise ReadStopped
        job = Job(self, index, len(columns), len(keys))
        self.jobs.append(job)
        return job

    def run(self, n_threads: int | None = None) -> None:
        """Reads every query added (ReadStopped or ReadInterrupted where one stops)."""
        status = self.lib.nsys_run(self.handle, threads() if n_threads is None else n_threads)
        if status == INTERRUPTED:
            raise ReadInterrupted
        if status != DONE:
            raise ReadStopped
