"""Nsight Systems runs exported with `nsys export --type sqlite` (with or without
`--ts-normalize`).

Tables read (NVIDIA documents them and says they may change between versions):
CUPTI_ACTIVITY_KIND_KERNEL (kernels), CUPTI_ACTIVITY_KIND_RUNTIME (CUDA runtime
calls), NVTX_EVENTS (ranges and marks, where present), StringIds (every name is
an id into it), ThreadNames (where present), TARGET_INFO_SESSION_START_TIME (the
session's start on the UTC epoch) and TARGET_INFO_GPU (device names).

Times: without --ts-normalize they are nanoseconds from the session's start, and
utcEpochNs places them on REALTIME; with it they already are UTC-epoch ns. A
globalTid packs the process id in bits 24..47 and the thread id in bits 0..23.

Every column read is checked (its type, and its range), so a NULL, text, BLOB or
out-of-range value is an error naming the table, the row and the column. The
kernel, runtime and NVTX tables are read in C (nsys_columns.c), which checks the
kernel and runtime columns as it reads them; where it cannot run, or meets anything
it is not sure of, the file is read through Python's sqlite3, every column checked
in SQL before a row is read, for the error's words."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np

from ..input_files import describe, open_regular
from ..recording_file.recording_checks import TIME_LIMIT_NS
from . import nsys_columns
from .kineto import load_kineto
from .trace import EVENT, KERNEL, HostTrace, HostTraceError, assemble

SQLITE_MAGIC = b"SQLite format 3\x00"
EPOCH_THRESHOLD_NS = 10**17  # a time above this is on the UTC epoch (after 1973), not session-relative
NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
NVTX_MARK = 34
KERNELS, RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
I64 = (-(1 << 63), (1 << 63) - 1)
TIME = (0, TIME_LIMIT_NS - 1)
FETCH_ROWS = 1 << 16  # rows turned into numpy at once: the Python rows of one batch are all that is held
NVTX_USED = f"eventType in {NVTX_RANGES + (NVTX_MARK,)} and globalTid is not null"


def _magic(path) -> bytes:
    try:
        with open_regular(path) as fh:
            return fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise HostTraceError(f"{path}: cannot read: {describe(exc)}") from None


def is_sqlite(path) -> bool:
    return _magic(path) == SQLITE_MAGIC


def pid_tid(global_tid: int) -> tuple[int, int]:
    return (global_tid >> 24) & 0xFFFFFF, global_tid & 0xFFFFFF


def _tables(db) -> set:
    return {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}


def _columns(db, table) -> set:
    return {r[1] for r in db.execute(f"pragma table_info({table})")}


def _uri(path) -> str:
    return Path(path).absolute().as_uri() + "?mode=ro"


def open_read_only(path) -> sqlite3.Connection:
    """The database at `path`, read-only: a file: URI with the path percent-escaped,
    so '#' or '?' in a name stay part of it (and no empty database is created)."""
    db = sqlite3.connect(_uri(path), uri=True)
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return db


# A query may run at most this long (and this much more per GB of file): a hostile
# schema (a virtual generated column, a costly default) cannot hold gpuobs for long.
QUERY_BUDGET_S = 30.0
QUERY_BUDGET_S_PER_GB = 60.0


def _limit_time(db: sqlite3.Connection, path: Path) -> tuple[float, float]:
    """Stops SQLite (a progress handler) once the budget for this file's size is spent:
    the budget (s) and its deadline (time.monotonic())."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    budget = QUERY_BUDGET_S + QUERY_BUDGET_S_PER_GB * size / 1e9
    deadline = time.monotonic() + budget
    db.set_progress_handler(lambda: time.monotonic() > deadline, 1_000)
    return budget, deadline


def load_nsys(path) -> HostTrace:
    path = Path(path)
    if _magic(path) != SQLITE_MAGIC:
        raise HostTraceError(f"{path}: not an SQLite file (expected `nsys export --type sqlite` output)")
    try:
        db = open_read_only(path)
    except sqlite3.Error as exc:
        raise HostTraceError(f"{path}: cannot read as SQLite: {exc}") from None
    budget, deadline = _limit_time(db, path)
    try:
        tables = _tables(db)
        if KERNELS not in tables or "StringIds" not in tables:
            raise HostTraceError(
                f"{path}: no {KERNELS} or StringIds table: not an Nsight Systems export with "
                "CUDA trace (was it recorded with --trace=cuda?)"
            )
        return _read_in_c(db, path, tables, deadline) or _read(db, path, tables, _PythonColumns(db))
    except nsys_columns.ReadInterrupted:
        raise _took_too_long(path, budget) from None
    except sqlite3.OperationalError as exc:
        if str(exc) == "interrupted":
            raise _took_too_long(path, budget) from None
        raise HostTraceError(f"{path}: {exc} (an nsys schema this reader does not know?)") from None
    except sqlite3.Error as exc:
        raise HostTraceError(f"{path}: {exc} (an nsys schema this reader does not know?)") from None
    finally:
        db.close()


def _took_too_long(path: Path, budget: float) -> HostTraceError:
    return HostTraceError(
        f"{path}: reading it took over {budget:.0f} s, stopped (a column this file computes on each "
        "read, or a schema made to be slow?)"
    )


def _read_in_c(db, path: Path, tables: set, deadline: float) -> HostTrace | None:
    """The trace with its big tables read by nsys_columns.c, or None where the helper is
    not here or stops (anything it is not sure of: an error, a value that fails a check),
    so that the Python reading runs, with its words. A query past the budget raises."""
    reader = nsys_columns.Reader.open(_uri(path), deadline - time.monotonic())
    if reader is None:
        return None
    try:
        return _read(db, path, tables, _CColumns(reader))
    except (nsys_columns.ReadStopped, HostTraceError, sqlite3.Error) as exc:
        if isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted":
            raise
        return None


def _shown(value) -> str:
    if value is None:
        return "NULL"
    text = repr(value)
    return f"{type(value).__name__.replace('bytes', 'BLOB').replace('str', 'text')} {text[:40]}"


class _Checks:
    """SQL checks of the columns about to be read, each a clear error on failure. They
    wait for flush(), which scans each table once for a row failing any of them, and
    only where one does runs them one by one, in order, for the first failure's words."""

    def __init__(self, db, path: Path):
        self.db, self.path = db, path
        self.pending: list = []  # (table, condition a failing row meets, the check on its own)

    def whole(self, table: str, column: str, lo: int, hi: int, nullable: bool = False, where: str = "") -> None:
        """Every value of `column` is an integer in [lo, hi] (or NULL where allowed)."""
        types = "('integer', 'null')" if nullable else "('integer')"
        fails = f"(typeof({column}) not in {types} or {column} < {int(lo)} or {column} > {int(hi)})"
        self.pending.append(
            (
                table,
                fails + (f" and ({where})" if where else ""),
                self._whole(table, column, lo, hi, nullable, fails, where),
            )
        )

    def _whole(self, table, column, lo, hi, nullable, fails, where):
        def check():
            extra = f" and ({where})" if where else ""
            row = self.db.execute(f"select rowid, {column} from {table} where {fails}{extra} limit 1").fetchone()
            if row is not None:
                raise HostTraceError(
                    f"{self.path}: {table} row {row[0]}: {column} is {_shown(row[1])}, expected a whole "
                    f"number in [{lo:,}, {hi:,}]{' or NULL' if nullable else ''}"
                )

        return check

    def ordered(self, table: str, where: str = "") -> None:
        """end >= start in every row (where `where` holds)."""
        fails = "end < start" + (f" and ({where})" if where else "")

        def check():
            row = self.db.execute(f"select rowid, start, end from {table} where {fails} limit 1").fetchone()
            if row is not None:
                raise HostTraceError(f"{self.path}: {table} row {row[0]}: end {row[2]:,} is before start {row[1]:,}")

        self.pending.append((table, fails, check))

    def times(self, table: str, offset: int, where: str = "", end_nullable: bool = False) -> None:
        """start and end are ns that, with `offset`, land on REALTIME before 2^62."""
        for column, nullable in (("start", False), ("end", end_nullable)):
            self.whole(table, column, 0, TIME[1] - offset, nullable, where)
        self.ordered(table, where)

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        tables = dict.fromkeys(table for table, _, _ in pending)
        for table in tables:
            fails = " or ".join(f"({c})" for t, c, _ in pending if t == table)
            if self.db.execute(f"select 1 from {table} where {fails} limit 1").fetchone() is not None:
                for _, _, check in pending:
                    check()


def _read(db, path: Path, tables: set, columns) -> HostTrace:
    """The trace, its big tables read through `columns`: _PythonColumns, after every
    check in SQL, or _CColumns, which checks the kernel and runtime columns as it reads
    them (and raises ReadStopped on a failure, for the Python reading's words)."""
    check = _Checks(db, path)
    in_sql = not columns.checks_while_reading
    start_epoch = 0
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        check.whole("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", *TIME, nullable=True)
        check.flush()
        row = db.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()
        start_epoch = int(row[0]) if row and row[0] is not None else 0
    kcols = _columns(db, KERNELS)
    name_col = "demangledName" if "demangledName" in kcols else "shortName"
    if in_sql:
        check.whole(KERNELS, "start", *TIME)
        check.flush()
    first = db.execute(f"select min(start) from {KERNELS}").fetchone()[0]
    if not isinstance(first, (int, type(None))):
        raise nsys_columns.ReadStopped  # the SQL check above stops the Python reading first
    if first is None or first >= EPOCH_THRESHOLD_NS:
        offset = 0  # --ts-normalize: already UTC epoch
    elif start_epoch:
        offset = start_epoch
    else:
        raise HostTraceError(
            f"{path}: session-relative times and no TARGET_INFO_SESSION_START_TIME: cannot place them on REALTIME"
        )
    at = (0, TIME[1] - offset)
    count = (0, (1 << 32) - 1)
    kernel_ranges = [at, at, (0, (1 << 31) - 1), (0, I64[1]), I64, I64, I64] + [count] * 6
    if in_sql:
        check.times(KERNELS, offset)
        for column, (lo, hi) in zip(
            ("deviceId", "streamId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
            kernel_ranges[2:4] + kernel_ranges[7:],
        ):
            check.whole(KERNELS, column, lo, hi)
        check.whole(KERNELS, "correlationId", *I64, nullable=True)
        check.whole(KERNELS, name_col, *I64, nullable=True)
    name_refs = [f"select {name_col} from {KERNELS}"]
    runtime = RUNTIME in tables
    if runtime:
        if in_sql:
            check.times(RUNTIME, offset)
            check.whole(RUNTIME, "globalTid", 0, I64[1])
        check.whole(RUNTIME, "correlationId", *I64, nullable=True)  # not read: checked in SQL either way
        if in_sql:
            check.whole(RUNTIME, "nameId", *I64, nullable=True)
        name_refs.append(f"select nameId from {RUNTIME}")
    nvtx = NVTX in tables
    if nvtx:
        check.whole(NVTX, "eventType", *I64, nullable=True)
        check.whole(NVTX, "globalTid", 0, I64[1], nullable=True)
        check.times(NVTX, offset, NVTX_USED, end_nullable=True)
        text_id = "textId" if "textId" in _columns(db, NVTX) else "NULL"
        if text_id != "NULL":
            check.whole(NVTX, "textId", *I64, nullable=True, where=NVTX_USED)
            name_refs.append(f"select textId from {NVTX}")
    names = "ThreadNames" in tables
    if names:
        check.whole("ThreadNames", "nameId", *I64)
        check.whole("ThreadNames", "globalTid", 0, I64[1])
        name_refs.append("select nameId from ThreadNames")
    check.flush()
    # Only the strings something here refers to.
    texts = _Texts()
    strings = dict(
        db.execute(f"select id, cast(value as text) from StringIds where id in ({' union '.join(name_refs)})")
    )
    k = columns.fetch(
        f"select start, end, deviceId, streamId, coalesce(correlationId, -1), {name_col} is null, "
        f"coalesce({name_col}, 0), gridX, gridY, gridZ, blockX, blockY, blockZ from {KERNELS}",
        kernel_ranges,
    )
    columns.ordered(k[0], k[1])
    kernels = _kernel_rows(k)  # names come with the events'
    parts = [_Part(k[0], k[1], ("stream", k[2], k[3]), k[5], k[6], "kernel")]
    del k  # the columns not in parts[0] let go
    if runtime:
        start, end, gtid, no_name, name = columns.fetch(
            f"select start, end, globalTid, nameId is null, coalesce(nameId, 0) from {RUNTIME}",
            [at, at, (0, I64[1]), I64, I64],
        )
        columns.ordered(start, end)
        parts.append(_Part(start, end, ("thread", *_pid_tid(gtid)), no_name, name, "cuda_runtime"))
    if nvtx:
        # marks, and ranges never closed, last 0 ns; a range's own text stands before its textId
        start, end, gtid, no_name, name, text = columns.fetch(
            f"select start, case when end is null or eventType = {NVTX_MARK} then start else end end, globalTid, "
            f"{text_id} is null, coalesce({text_id}, 0), cast(text as text) from {NVTX} where {NVTX_USED}",
            [I64, I64, I64, I64, I64, nsys_columns.TEXT],
            code=texts.code,
        )
        parts.append(_Part(start, end, ("nvtx", *_pid_tid(gtid)), no_name, name, "nvtx", text))
    thread_names = {}
    if names:
        for name_id, gtid in db.execute("select nameId, globalTid from ThreadNames"):
            thread_names[pid_tid(gtid)] = strings.get(name_id, f"string#{name_id}")
    return _assemble_parts(path, parts, kernels, strings, thread_names, offset, texts)


class _PythonColumns:
    """A query's columns through Python's sqlite3, a batch of rows at a time rather than
    a Python row at a time, as int64 arrays: whole numbers (checked in SQL before, never
    NULL), and a text column (the last) as code(text) of each (-1 for NULL), so that
    only one copy of each text is held."""

    checks_while_reading = False

    def __init__(self, db):
        self.db = db

    def fetch(self, query: str, ranges: list, code=None) -> list:
        cursor = self.db.execute(query)
        width = len(cursor.description)
        texts = 1 if code is not None else 0
        batches: list = [[] for _ in range(width)]
        while rows := cursor.fetchmany(FETCH_ROWS):
            for i, column in enumerate(zip(*rows)):
                if i >= width - texts:
                    column = [-1 if text is None else code(text) for text in column]
                batches[i].append(np.array(column, np.int64))
        return [np.concatenate(b) if b else np.zeros(0, np.int64) for b in batches]

    def ordered(self, start: np.ndarray, end: np.ndarray) -> None:
        pass  # checked in SQL before


class _CColumns:
    """The same columns read by nsys_columns.c, each checked against its range as it is
    read (ReadStopped where one fails, or where end comes before start)."""

    checks_while_reading = True

    def __init__(self, reader):
        self.reader = reader

    def fetch(self, query: str, ranges: list, code=None) -> list:
        columns, texts = self.reader.columns(query, ranges)
        if code is not None:
            # coded in first-seen order, as the Python reading codes them row by row
            by_text = np.array([code(t.decode("utf-8", "replace")) for t in texts] + [-1], np.int64)
            columns[-1] = by_text[columns[-1]]
        return columns

    def ordered(self, start: np.ndarray, end: np.ndarray) -> None:
        if (end < start).any():
            raise nsys_columns.ReadStopped


class _Texts:
    """Every name, track and category, each held once and coded by position."""

    def __init__(self):
        self.values: list = []
        self._codes: dict = {}

    def code(self, value) -> int:
        index = self._codes.get(value)
        if index is None:
            index = self._codes[value] = len(self.values)
            self.values.append(value)
        return index


def _pid_tid(global_tids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (global_tids >> 24) & 0xFFFFFF, global_tids & 0xFFFFFF


def _pairs(a: np.ndarray, b: np.ndarray) -> tuple[list, np.ndarray]:
    """The distinct (a, b) pairs, and each row's pair's index among them."""
    a_values, a_index = np.unique(a, return_inverse=True)
    b_values, b_index = np.unique(b, return_inverse=True)
    combined, pair = np.unique(a_index.reshape(-1) * len(b_values) + b_index.reshape(-1), return_inverse=True)
    a_values, b_values = a_values.tolist(), b_values.tolist()
    pairs = [(a_values[c // len(b_values)], b_values[c % len(b_values)]) for c in combined.tolist()]
    return pairs, pair.reshape(-1)


class _Part:
    """One table's events as columns: start and end, track (kind, owner and lane
    columns), name (a NULL flag and a StringIds id, or the row's own text where it
    has one) and category."""

    def __init__(self, start, end, track: tuple, no_name, name_id, category: str, own_text: np.ndarray | None = None):
        self.start, self.end, self.track, self.category = start, end, track, category
        self.no_name, self.name_id, self.own_text = no_name, name_id, own_text


def _kernel_rows(k: list) -> np.ndarray:
    """KERNEL rows of the kernel table's columns, all but the name."""
    kernels = np.zeros(len(k[0]), KERNEL)
    kernels["start_ns"], kernels["dur_ns"], kernels["device"], kernels["stream"] = k[0], k[1] - k[0], k[2], k[3]
    kernels["correlation"] = k[4]
    kernels["grid"], kernels["block"] = np.stack(k[7:10], axis=1), np.stack(k[10:13], axis=1)
    return kernels


def _assemble_parts(
    path: Path, parts: list, kernels: np.ndarray, strings: dict, thread_names: dict, offset: int, texts: _Texts
) -> HostTrace:
    """The parts' rows, in order, as one HostTrace (kernels first, as they were read),
    `offset` ns after their times (the session's start, unless already on the epoch)."""
    code = texts.code
    events = np.zeros(sum(len(p.start) for p in parts), EVENT)
    at = 0
    for p in parts:
        rows = slice(at, at + len(p.start))
        events["start_ns"][rows] = p.start
        events["dur_ns"][rows] = p.end - p.start
        ids, inverse = np.unique(p.name_id, return_inverse=True)
        by_id = np.array([code(strings.get(i, f"string#{i}")) for i in ids.tolist()] + [0], np.int64)
        name = by_id[inverse.reshape(-1)]
        name[p.no_name == 1] = code("")
        if p.own_text is not None:
            name = np.where(p.own_text >= 0, p.own_text, name)
        events["name"][rows] = name
        kind, owner, lane = p.track
        pairs, pair = _pairs(owner, lane)
        by_pair = np.array([code((kind, a, b)) for a, b in pairs] + [0], np.int64)
        events["track"][rows] = by_pair[pair]
        events["category"][rows] = code(p.category)
        at += len(p.start)
    kernels["name"] = events["name"][: len(kernels)]
    return assemble(
        path, "nsys", events, kernels, texts.values, texts.values, texts.values, thread_names, offset_ns=offset
    )


def load_host_trace(path) -> HostTrace:
    """A PyTorch-profiler JSON or an nsys SQLite export, told apart by content."""
    return load_nsys(path) if is_sqlite(path) else load_kineto(path)
