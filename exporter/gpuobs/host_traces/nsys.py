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
kernel, runtime and NVTX tables are read in C (nsys_columns.c), each on its own
connection and thread, every column checked as it is read; where it cannot run, or
meets anything it is not sure of, the file is read through Python's sqlite3, every
column checked in SQL before a row is read, for the error's words."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import numpy as np

from ..beside import Beside
from ..input_files import describe, open_regular
from ..recording_file.recording_checks import TIME_LIMIT_NS
from . import nsys_columns
from .kineto import load_kineto
from .pooled_names import PooledNames, numbered_names
from .trace import EVENT, KERNEL, HostTrace, HostTraceError, TrackKeys, assemble, unique_inverse

SQLITE_MAGIC = b"SQLite format 3\x00"
EPOCH_THRESHOLD_NS = 10**17  # a time above this is on the UTC epoch (after 1973), not session-relative
NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
NVTX_MARK = 34
KERNELS, RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
I64 = (-(1 << 63), (1 << 63) - 1)
TIME = (0, TIME_LIMIT_NS - 1)
FETCH_ROWS = 1 << 16  # rows turned into numpy at once: the Python rows of one batch are all that is held
NVTX_USED = f"eventType in {NVTX_RANGES + (NVTX_MARK,)} and globalTid is not null"
CATEGORIES = ("kernel", "cuda_runtime", "nvtx")  # the C read's events' categories


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
        return _read_in_c(db, path, tables, deadline) or _read(db, path, tables)
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
    # the tables' rows counted on a connection and thread of their own, beside the checks
    counting = Beside(_counted, path, [t for t in (KERNELS, RUNTIME, NVTX) if t in tables], deadline)
    try:
        return _read_c(db, path, tables, reader, counting)
    except (nsys_columns.ReadStopped, HostTraceError, sqlite3.Error) as exc:
        if isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted":
            raise
        return None
    finally:
        counting.join()


def _counted(path: Path, tables: list, deadline: float) -> list:
    """Each table's row count (SQLite walks every page of it), on a read-only connection of
    its own under the same deadline."""
    db = open_read_only(path)
    try:
        db.set_progress_handler(lambda: time.monotonic() > deadline, 1_000)
        return [db.execute(f"select count(*) from {table}").fetchone()[0] for table in tables]
    finally:
        db.close()


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


def _session_start(db, tables: set, check: _Checks) -> int:
    """The session's start on the UTC epoch (ns), 0 where the file does not say."""
    if "TARGET_INFO_SESSION_START_TIME" not in tables:
        return 0
    check.whole("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", *TIME, nullable=True)
    check.flush()
    row = db.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _offset(path: Path, first, start_epoch: int) -> int:
    """What to add to the file's times for REALTIME, from the first kernel's start."""
    if first is None or first >= EPOCH_THRESHOLD_NS:
        return 0  # --ts-normalize: already UTC epoch
    if start_epoch:
        return start_epoch
    raise HostTraceError(
        f"{path}: session-relative times and no TARGET_INFO_SESSION_START_TIME: cannot place them on REALTIME"
    )


def _kernel_name(db) -> str:
    return "demangledName" if "demangledName" in _columns(db, KERNELS) else "shortName"


def _nvtx_text_id(db) -> str:
    return "textId" if "textId" in _columns(db, NVTX) else "NULL"


# The queries of the Python reading (the C reading's scan the same tables in the same order).
def _kernel_query(name_col: str) -> str:
    return (
        f"select start, end, deviceId, streamId, coalesce(correlationId, -1), {name_col} is null, "
        f"coalesce({name_col}, 0), gridX, gridY, gridZ, blockX, blockY, blockZ from {KERNELS}"
    )


RUNTIME_QUERY = f"select start, end, globalTid, nameId is null, coalesce(nameId, 0) from {RUNTIME}"


def _nvtx_query(text_id: str) -> str:
    # marks, and ranges never closed, last 0 ns; a range's own text stands before its textId
    return (
        f"select start, case when end is null or eventType = {NVTX_MARK} then start else end end, globalTid, "
        f"{text_id} is null, coalesce({text_id}, 0), cast(text as text) from {NVTX} where {NVTX_USED}"
    )


def _read(db, path: Path, tables: set) -> HostTrace:
    """The trace read through Python's sqlite3, every column checked in SQL first."""
    check = _Checks(db, path)
    start_epoch = _session_start(db, tables, check)
    name_col = _kernel_name(db)
    check.whole(KERNELS, "start", *TIME)
    check.flush()
    offset = _offset(path, db.execute(f"select min(start) from {KERNELS}").fetchone()[0], start_epoch)
    count = (0, (1 << 32) - 1)
    check.times(KERNELS, offset)
    for column, (lo, hi) in zip(
        ("deviceId", "streamId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
        [(0, (1 << 31) - 1), (0, I64[1])] + [count] * 6,
    ):
        check.whole(KERNELS, column, lo, hi)
    check.whole(KERNELS, "correlationId", *I64, nullable=True)
    check.whole(KERNELS, name_col, *I64, nullable=True)
    name_refs = [f"select {name_col} from {KERNELS}"]
    runtime = RUNTIME in tables
    if runtime:
        check.times(RUNTIME, offset)
        check.whole(RUNTIME, "globalTid", 0, I64[1])
        check.whole(RUNTIME, "correlationId", *I64, nullable=True)  # not read: checked all the same
        check.whole(RUNTIME, "nameId", *I64, nullable=True)
        name_refs.append(f"select nameId from {RUNTIME}")
    nvtx = NVTX in tables
    if nvtx:
        check.whole(NVTX, "eventType", *I64, nullable=True)
        check.whole(NVTX, "globalTid", 0, I64[1], nullable=True)
        check.times(NVTX, offset, NVTX_USED, end_nullable=True)
        text_id = _nvtx_text_id(db)
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
    k = _fetch(db, _kernel_query(name_col))
    kernels = _kernel_rows(k)  # names come with the events'
    parts = [_Part(k[0], k[1], *_tracks("stream", k[2], k[3]), *_name_keys(k[5], k[6]), "kernel")]
    del k  # the columns not in parts[0] let go
    if runtime:
        start, end, gtid, no_name, name = _fetch(db, RUNTIME_QUERY)
        parts.append(_Part(start, end, *_tracks("thread", *_pid_tid(gtid)), *_name_keys(no_name, name), "cuda_runtime"))
    if nvtx:
        start, end, gtid, no_name, name, text = _fetch(db, _nvtx_query(text_id), code=texts.code)
        parts.append(_Part(start, end, *_tracks("nvtx", *_pid_tid(gtid)), *_name_keys(no_name, name), "nvtx", text))
    thread_names = {}
    if names:
        for name_id, gtid in db.execute("select nameId, globalTid from ThreadNames"):
            thread_names[pid_tid(gtid)] = strings.get(name_id, f"string#{name_id}")
    return _assemble_parts(path, parts, kernels, strings, thread_names, offset, texts)


def _fetch(db, query: str, code=None) -> list:
    """A query's columns through Python's sqlite3, a batch of rows at a time rather than
    a Python row at a time, as int64 arrays: whole numbers (checked in SQL before, never
    NULL), and a text column (the last) as code(text) of each (-1 for NULL), so that
    only one copy of each text is held."""
    cursor = db.execute(query)
    width = len(cursor.description)
    texts = 1 if code is not None else 0
    batches: list = [[] for _ in range(width)]
    while rows := cursor.fetchmany(FETCH_ROWS):
        for i, column in enumerate(zip(*rows)):
            if i >= width - texts:
                column = [-1 if text is None else code(text) for text in column]
            batches[i].append(np.array(column, np.int64))
    return [np.concatenate(b) if b else np.zeros(0, np.int64) for b in batches]


def _scans_in_order(db, queries: list) -> bool:
    """Whether each (query, table) reads the whole table, no index: the rows in the
    table's own order, whatever the query reads of them."""
    for query, table in queries:
        plan = [row[3] for row in db.execute(f"explain query plan {query}")]
        if plan not in ([f"SCAN {table}"], [f"SCAN TABLE {table}"]):
            return False
    return True


def _read_c(db, path: Path, tables: set, reader, counting: Beside) -> HostTrace:
    """The trace, its big tables read by nsys_columns.c, every column checked there as it
    is read (ReadStopped where one fails, for the Python reading's words); counting: the
    kernel, runtime and NVTX tables' row counts, those there, when its result comes."""
    C, Key, TEXT = nsys_columns.Column, nsys_columns.Key, nsys_columns.TEXT
    check = _Checks(db, path)
    start_epoch = _session_start(db, tables, check)
    name_col = _kernel_name(db)
    runtime, nvtx, names = RUNTIME in tables, NVTX in tables, "ThreadNames" in tables
    when, count, nullable = C(*TIME), C(0, (1 << 32) - 1), C(*I64, nullable=True, out=False)
    # times are checked on [0, 2^62) here, against the offset once the kernels' first start is known
    queries = []
    kernel_query = (
        f"select start, end, deviceId, streamId, correlationId, {name_col}, "
        f"gridX, gridY, gridZ, blockX, blockY, blockZ from {KERNELS}"
    )
    queries += [(kernel_query, KERNELS), (_kernel_query(name_col), KERNELS)]
    k = reader.add(
        kernel_query,
        [when, when, C(0, (1 << 31) - 1), C(0, I64[1]), C(*I64, nullable=True, null_value=-1), nullable] + [count] * 6,
        keys=(Key(5), Key(2, 3)),  # name (id, NULL), track (device, stream)
        ordered=(0, 1),
    )
    if runtime:
        runtime_query = f"select start, end, globalTid, nameId, correlationId from {RUNTIME}"
        queries += [(runtime_query, RUNTIME), (RUNTIME_QUERY, RUNTIME)]
        r = reader.add(
            runtime_query,
            [when, when, C(0, I64[1], out=False), nullable, nullable],
            keys=(Key(3), Key(2)),  # name (id, NULL), thread
            ordered=(0, 1),
        )
    if nvtx:
        text_id = _nvtx_text_id(db)
        nvtx_query = f"select eventType, globalTid, start, end, {text_id}, cast(text as text) from {NVTX}"
        queries += [(nvtx_query, NVTX), (_nvtx_query(text_id), NVTX)]
        n = reader.add(
            nvtx_query,
            [nullable, C(0, I64[1], nullable=True, out=False), when, C(*TIME, nullable=True), nullable, TEXT],
            keys=(Key(4), Key(1)),  # name (textId, NULL), thread
            mode=nsys_columns.NVTX,
            ordered=(2, 3),
        )
    if not _scans_in_order(db, queries):
        raise nsys_columns.ReadStopped  # an index or a virtual table: rows could come in another order
    # C writes the rows straight into numpy's (no C column of them), as many as each table holds
    counts = counting.result()
    at = np.cumsum([0] + counts).tolist()
    events = np.empty(at[-1], EVENT)  # every field of every row read written below; NVTX's unread rows cut
    kernels = np.empty(counts[0], KERNEL)
    span = {"start_ns": 0, "dur_ns": (1, 0)}
    k.sink(
        kernels,
        span
        | {"device": 2, "stream": 3, "correlation": 4}
        | {("grid", i): 5 + i for i in range(3)}
        | {("block", i): 8 + i for i in range(3)},
    )
    k.sink(events[: at[1]], span | {"name": 11, "track": 12})  # key numbers, made codes below
    if runtime:
        r.sink(events[at[1] : at[2]], span | {"name": 2, "track": 3})
    if nvtx:
        n.sink(events[at[-2] : at[-1]], span | {"name": 3, "track": 4, "category": 2})  # category: the text's
    reader.run()
    if k.rows != counts[0] or (runtime and r.rows != counts[1]):
        raise nsys_columns.ReadStopped  # not the rows counted: the file changed under the read
    low, high = k.bounds()
    offset = _offset(path, int(low[0]) if k.rows else None, start_epoch)
    for job, times in ((k, (0, 1)), (r if runtime else None, (0, 1)), (n if nvtx else None, (2, 3))):
        if job is not None and max(job.bounds()[1][list(times)]) > TIME[1] - offset:
            raise nsys_columns.ReadStopped  # past 2^62 once on REALTIME: the Python reading's error
    thread_rows = []
    if names:
        check.whole("ThreadNames", "nameId", *I64)
        check.whole("ThreadNames", "globalTid", 0, I64[1])
        check.flush()
        thread_rows = db.execute("select nameId, globalTid from ThreadNames").fetchall()
    # the track keys found on a thread of their own (numpy on copies of the C keys) beside the names
    track_job = Beside(
        _track_keys, [job.keys(1) for job in [k] + ([r] if runtime else []) + ([n] if nvtx else [])], runtime
    )
    try:
        names, name_codes, own, ids, strings = _names_read(
            db, k, r if runtime else None, n if nvtx else None, thread_rows
        )
    except BaseException:
        track_job.join()
        raise
    track_keys, track_of, sizes = track_job.result()
    # each job's rows renumbered in place, in C (names and tracks by the codes above)
    tracks, at_key = track_of[: sizes[0]], sizes[0]
    nsys_columns.remap(events[: at[1]], name_codes[0], tracks, -1, CATEGORIES.index("kernel"))
    k.release()
    if runtime:
        tracks, at_key = track_of[at_key : at_key + sizes[1]], at_key + sizes[1]
        nsys_columns.remap(events[at[1] : at[2]], name_codes[1], tracks, -1, CATEGORIES.index("cuda_runtime"))
        r.release()
    if nvtx:
        rows = events[at[-2] : at[-2] + n.rows]  # a row's own text (NVTX's), where it has one, names it
        nsys_columns.remap(
            rows, name_codes[-1], track_of[at_key:], len(ids) if len(own) else -1, CATEGORIES.index("nvtx")
        )
        events = events[: at[-2] + n.rows]
        n.release()  # after its rows are counted: release clears the count
    kernels["name"] = events["name"][: len(kernels)]
    thread_names = {pid_tid(gtid): strings.get(name_id, f"string#{name_id}") for name_id, gtid in thread_rows}
    return assemble(path, "nsys", events, kernels, names, track_keys, list(CATEGORIES), thread_names, offset_ns=offset)


def _names_read(db, k, r, n, thread_rows) -> tuple:
    """The read's names, pooled: the ids' names, then NVTX's own texts, then "" (a NULL
    id), equal ones merged in assemble; each job's name codes (per name key, as the jobs
    k, r and n give them; r and n None where their table is not there), NVTX's own texts
    and the distinct ids."""
    name_keys = [job.keys(0) for job in (k, r, n) if job is not None]
    # each distinct id looked up and named once (a file can give every row its own name)
    named = [keys[:, 1] == 0 for keys in name_keys]  # per job: no (n, 2) copy of every job's keys
    ids, id_of = unique_inverse(np.concatenate([k[m, 0] for k, m in zip(name_keys, named)]), index_dtype=np.int32)
    strings = _strings(db, _sorted_union(ids, [i for i, _ in thread_rows]))
    own = [t.decode("utf-8", "replace").encode() for t in n.texts()] if n is not None else []
    names = PooledNames.joined([_id_names(ids, strings), PooledNames.of_bytes(own), PooledNames.of([""])])
    unnamed = len(ids) + len(own)
    name_codes, at_id = [], 0  # per job, as name_keys
    for m in named:
        codes = np.full(len(m), unnamed, np.int32)
        codes[m] = id_of[at_id : at_id + int(m.sum())]
        at_id += int(m.sum())
        name_codes.append(codes)
    return names, name_codes, own, ids, strings


def _track_keys(keys: list, runtime: bool) -> tuple:
    """Every track key once, as columns (no tuple per key): streams (the kernels' (device,
    stream) keys), then threads, then NVTX (their global thread ids); each key row's
    track as int32, and the key counts per job."""
    gtids = [k[:, 0] for k in keys[1:]]
    parts = [(0, keys[0][:, 0], keys[0][:, 1])] + [(1 + i + (not runtime), *_pid_tid(g)) for i, g in enumerate(gtids)]
    track_keys, track_of = TrackKeys.of_parts(("stream", "thread", "nvtx"), parts)
    track_of = track_of.astype(np.int32, copy=False)  # int32 already where _of_codes made it
    return track_keys, track_of, [len(k) for k in keys]


def _sorted_union(ids: np.ndarray, more: list) -> np.ndarray:
    """np.union1d(ids, more) of distinct sorted int64 ids and a few more ints, without
    np.unique's pass over them all (0.1 s for 360,000 ids here)."""
    more = np.unique(np.array(more, np.int64))
    at = np.searchsorted(ids, more)
    new = more[(at == len(ids)) | (ids[np.minimum(at, len(ids) - 1)] != more)] if len(ids) else more
    return np.insert(ids, np.searchsorted(ids, new), new) if len(new) else ids


def _id_names(ids: np.ndarray, strings: dict) -> PooledNames:
    """Each id's StringIds text (None for a NULL value), `string#N` where the table has
    no row of it, pooled in the order of `ids` (distinct): what
    `strings.get(i, f"string#{i}")` gives, with no Python string per missing id."""
    if all(type(i) is int for i in strings):  # then `in` is np.isin's (REAL ids: by Python)
        found = np.isin(ids, np.fromiter(strings, np.int64, len(strings)))
    else:
        found = np.fromiter((i in strings for i in ids.tolist()), bool, len(ids))
    missing, present = np.flatnonzero(~found), np.flatnonzero(found)
    made = numbered_names("string#", ids[missing])
    given = PooledNames.of([strings[i] for i in ids[present].tolist()])
    starts, lengths = np.empty(len(ids), np.int64), np.empty(len(ids), np.int64)
    starts[missing], lengths[missing] = made.starts, made.lengths
    starts[present], lengths[present] = given.starts + len(made.chars), given.lengths
    none = np.zeros(len(ids), bool)
    if given.none is not None:
        none[present] = given.none
    prefix, values, _ = made.numbered
    chars = np.concatenate([made.chars, given.chars])
    return PooledNames(chars, starts, lengths, none, numbered=(prefix, values, missing))


def _strings(db, ids: np.ndarray) -> dict:
    """StringIds' texts of these ids (sorted, distinct; the others are never looked up).
    Where the table holds no more rows than there are ids (a file of a name per row), it
    is read whole and kept where its id is one of them, if every id in it is an integer
    (what `in` then finds is Python's and SQL's alike), rather than handing SQL a list of
    them all."""
    rows = None
    if db.execute("select count(*) from StringIds").fetchone()[0] <= len(ids):
        every = db.execute("select id, cast(value as text) from StringIds").fetchall()
        if all(type(i) is int for i, _ in every):  # SQLite's integers: all fit int64
            wanted = np.isin(np.fromiter((i for i, _ in every), np.int64, len(every)), ids)
            rows = [row for row, keep in zip(every, wanted.tolist()) if keep]
    if rows is None:
        rows = db.execute(
            "select id, cast(value as text) from StringIds where id in (select value from json_each(?))",
            (json.dumps(ids.tolist()),),
        ).fetchall()
    strings = dict(rows)
    if len(strings) != len(rows):
        raise nsys_columns.ReadStopped  # an id twice: which one the Python reading keeps is its query's order
    return strings


def _fill_rows(
    events, at, start, dur, name_index, name_keys, track_index, track_keys, category, own=None, *, strings, texts
):
    """One table's rows into events[at:]; where the next table's begin."""
    code = texts.code
    rows = slice(at, at + len(start))
    events["start_ns"][rows] = start
    events["dur_ns"][rows] = dur
    by_name = np.array(
        [code("") if null else code(strings.get(i, f"string#{i}")) for i, null in name_keys.tolist()] + [0], np.int64
    )
    name = by_name[name_index]
    if own is not None:
        name = np.where(own >= 0, own, name)
    events["name"][rows] = name
    events["track"][rows] = np.array([code(t) for t in track_keys] + [0], np.int64)[track_index]
    events["category"][rows] = code(category)
    return rows.stop


class _Texts:
    """Every name, track and category coded by position, each coded value held once
    (values appended to `values` directly may repeat one: assemble merges them)."""

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


def _tracks(kind: str, owner: np.ndarray, lane: np.ndarray) -> tuple[list, np.ndarray]:
    """The distinct tracks (kind, owner, lane) of these rows, and each row's track's index."""
    pairs, pair = _pairs(owner, lane)
    return [(kind, a, b) for a, b in pairs], pair


def _name_keys(no_name: np.ndarray, name_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's name's index, and the names as (StringIds id, whether NULL) pairs."""
    ids, inverse = np.unique(name_id, return_inverse=True)
    index = inverse.reshape(-1)
    index[no_name == 1] = len(ids)
    keys = np.zeros((len(ids) + 1, 2), np.int64)
    keys[:-1, 0], keys[-1, 1] = ids, 1
    return index, keys


class _Part:
    """One table's events as columns: start and end, track (the distinct tracks and each
    row's index among them), name (the distinct (StringIds id, NULL) pairs and each row's
    index, or the row's own text where it has one) and category."""

    def __init__(self, start, end, track_keys, track_index, name_index, name_keys, category, own_text=None):
        self.start, self.end, self.category = start, end, category
        self.track_keys, self.track_index = track_keys, track_index
        self.name_index, self.name_keys, self.own_text = name_index, name_keys, own_text


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
    events = np.zeros(sum(len(p.start) for p in parts), EVENT)
    at = 0
    for p in parts:
        at = _fill_rows(
            events,
            at,
            p.start,
            p.end - p.start,
            p.name_index,
            p.name_keys,
            p.track_index,
            p.track_keys,
            p.category,
            p.own_text,
            strings=strings,
            texts=texts,
        )
    kernels["name"] = events["name"][: len(kernels)]
    return assemble(
        path, "nsys", events, kernels, texts.values, texts.values, texts.values, thread_names, offset_ns=offset
    )


def load_host_trace(path) -> HostTrace:
    """A PyTorch-profiler JSON or an nsys SQLite export, told apart by content."""
    return load_nsys(path) if is_sqlite(path) else load_kineto(path)
