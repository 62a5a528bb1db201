"""nsys_columns.c, an SQLite query's rows read in C into int64 columns, compiled on
first use with the host C compiler and loaded through cffi, as the other C helpers
are; SQLite itself is the system's libsqlite3 (GPUOBS_SQLITE_LIB names another),
loaded at run time. Where it cannot be built or loaded (or GPUOBS_PURE_PYTHON=1), or
where a read meets anything it does not take (nsys_columns.c says what), nsys.py
reads the file through Python's sqlite3: the same rows, the same errors (tests)."""

from __future__ import annotations

import os
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
BATCH = 1 << 16  # rows per call
DONE, FULL, BAIL, INTERRUPTED = 0, 1, 2, 3
_FFI = FFI()
_FFI.cdef("""
typedef struct reader reader;
reader* nsys_open(const char* library, const char* uri, double seconds);
void nsys_close(reader* r);
int nsys_prepare(reader* r, const char* sql, int n_columns, const int32_t* kind, const int64_t* lo,
                 const int64_t* hi);
int nsys_read(reader* r, int64_t* out, int64_t max_rows, int64_t* n_rows);
int64_t nsys_text_count(reader* r);
const char* nsys_text_pool(reader* r);
const int64_t* nsys_text_offsets(reader* r);
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


TEXT = None  # a column's range for a text column: each distinct text's code in first-seen order, -1 for NULL


class Reader:
    """A read-only connection through the C helper; None from open() where the helper
    or libsqlite3 is not there, or SQLite cannot open the file."""

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    @classmethod
    def open(cls, uri: str, seconds: float) -> "Reader | None":
        lib = library()
        if lib is None:
            return None
        name = os.environ.get("GPUOBS_SQLITE_LIB") or SQLITE_LIBRARY
        handle = lib.nsys_open(name.encode(), uri.encode(), seconds)
        if handle == _FFI.NULL:
            return None
        return cls(lib, _FFI.gc(handle, lib.nsys_close))

    def columns(self, query: str, ranges: list) -> tuple[list, list]:
        """The query's columns as int64 arrays, each a whole number in its (lo, hi) range
        (or TEXT), and the texts (bytes) by code."""
        width = len(ranges)
        kind = np.array([r is TEXT for r in ranges], np.int32)
        lo = np.array([0 if r is TEXT else r[0] for r in ranges], np.int64)
        hi = np.array([0 if r is TEXT else r[1] for r in ranges], np.int64)
        pointers = (_FFI.cast("int32_t*", kind.ctypes.data), *(_FFI.cast("int64_t*", a.ctypes.data) for a in (lo, hi)))
        if not self.lib.nsys_prepare(self.handle, query.encode(), width, *pointers):
            raise ReadStopped
        out = np.empty((width, BATCH), np.int64)
        n_rows = np.zeros(1, np.int64)
        batches: list = [[] for _ in range(width)]  # per column: one batch's copy held, not a row's
        while True:
            status = self.lib.nsys_read(
                self.handle, _FFI.cast("int64_t*", out.ctypes.data), BATCH, _FFI.cast("int64_t*", n_rows.ctypes.data)
            )
            if status == INTERRUPTED:
                raise ReadInterrupted
            if status == BAIL:
                raise ReadStopped
            for column, batch in zip(out[:, : n_rows[0]], batches):
                batch.append(column.copy())
            if status == DONE:
                break
        columns = []
        for i in range(width):  # a column at a time, its batches let go: at most one column held twice
            columns.append(np.concatenate(batches[i]) if batches[i] else np.zeros(0, np.int64))
            batches[i] = None
        return columns, self._texts()

    def _texts(self) -> list:
        count = int(self.lib.nsys_text_count(self.handle))
        return pooled_texts(_FFI, count, self.lib.nsys_text_pool(self.handle), self.lib.nsys_text_offsets(self.handle))
