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

Every column read is checked in SQL before a row is read (its type, and its
range), so a NULL, text, BLOB or out-of-range value is an error naming the
table, the row and the column; rows then stream into compact columns."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ..input_files import describe, open_regular
from ..recording_file.recording_checks import TIME_LIMIT_NS
from .kineto import load_kineto
from .trace import HostTrace, HostTraceBuilder, HostTraceError

SQLITE_MAGIC = b"SQLite format 3\x00"
EPOCH_THRESHOLD_NS = 10**17  # a time above this is on the UTC epoch (after 1973), not session-relative
NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
NVTX_MARK = 34
KERNELS, RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
I64 = (-(1 << 63), (1 << 63) - 1)
TIME = (0, TIME_LIMIT_NS - 1)
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


def open_read_only(path) -> sqlite3.Connection:
    """The database at `path`, read-only: a file: URI with the path percent-escaped,
    so '#' or '?' in a name stay part of it (and no empty database is created)."""
    db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return db


# A query may run at most this long (and this much more per GB of file): a hostile
# schema (a virtual generated column, a costly default) cannot hold gpuobs for long.
QUERY_BUDGET_S = 30.0
QUERY_BUDGET_S_PER_GB = 60.0


def _limit_time(db: sqlite3.Connection, path: Path) -> float:
    """Stops SQLite (a progress handler) once the budget for this file's size is spent."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    budget = QUERY_BUDGET_S + QUERY_BUDGET_S_PER_GB * size / 1e9
    deadline = time.monotonic() + budget
    db.set_progress_handler(lambda: time.monotonic() > deadline, 1_000)
    return budget


def load_nsys(path) -> HostTrace:
    path = Path(path)
    if _magic(path) != SQLITE_MAGIC:
        raise HostTraceError(f"{path}: not an SQLite file (expected `nsys export --type sqlite` output)")
    try:
        db = open_read_only(path)
    except sqlite3.Error as exc:
        raise HostTraceError(f"{path}: cannot read as SQLite: {exc}") from None
    budget = _limit_time(db, path)
    try:
        tables = _tables(db)
        if KERNELS not in tables or "StringIds" not in tables:
            raise HostTraceError(
                f"{path}: no {KERNELS} or StringIds table: not an Nsight Systems export with "
                "CUDA trace (was it recorded with --trace=cuda?)"
            )
        return _read(db, path, tables)
    except sqlite3.OperationalError as exc:
        if str(exc) == "interrupted":
            raise HostTraceError(
                f"{path}: reading it took over {budget:.0f} s, stopped (a column this file computes on each "
                "read, or a schema made to be slow?)"
            ) from None
        raise HostTraceError(f"{path}: {exc} (an nsys schema this reader does not know?)") from None
    except sqlite3.Error as exc:
        raise HostTraceError(f"{path}: {exc} (an nsys schema this reader does not know?)") from None
    finally:
        db.close()


def _shown(value) -> str:
    if value is None:
        return "NULL"
    text = repr(value)
    return f"{type(value).__name__.replace('bytes', 'BLOB').replace('str', 'text')} {text[:40]}"


class _Checks:
    """SQL checks of the columns about to be read, each a clear error on failure."""

    def __init__(self, db, path: Path):
        self.db, self.path = db, path

    def whole(self, table: str, column: str, lo: int, hi: int, nullable: bool = False, where: str = "") -> None:
        """Every value of `column` is an integer in [lo, hi] (or NULL where allowed)."""
        types = "('integer', 'null')" if nullable else "('integer')"
        extra = f" and ({where})" if where else ""
        row = self.db.execute(
            f"select rowid, {column} from {table} where (typeof({column}) not in {types} or "
            f"{column} < ? or {column} > ?){extra} limit 1",
            (lo, hi),
        ).fetchone()
        if row is not None:
            raise HostTraceError(
                f"{self.path}: {table} row {row[0]}: {column} is {_shown(row[1])}, expected a whole "
                f"number in [{lo:,}, {hi:,}]{' or NULL' if nullable else ''}"
            )

    def ordered(self, table: str, where: str = "") -> None:
        """end >= start in every row (where `where` holds)."""
        extra = f" and ({where})" if where else ""
        row = self.db.execute(f"select rowid, start, end from {table} where end < start{extra} limit 1").fetchone()
        if row is not None:
            raise HostTraceError(f"{self.path}: {table} row {row[0]}: end {row[2]:,} is before start {row[1]:,}")

    def times(self, table: str, offset: int, where: str = "", end_nullable: bool = False) -> None:
        """start and end are ns that, with `offset`, land on REALTIME before 2^62."""
        for column, nullable in (("start", False), ("end", end_nullable)):
            self.whole(table, column, 0, TIME[1] - offset, nullable, where)
        self.ordered(table, where)


def _read(db, path: Path, tables: set) -> HostTrace:
    check = _Checks(db, path)
    start_epoch = 0
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        check.whole("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", *TIME, nullable=True)
        row = db.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()
        start_epoch = int(row[0]) if row and row[0] is not None else 0
    kcols = _columns(db, KERNELS)
    name_col = "demangledName" if "demangledName" in kcols else "shortName"
    check.whole(KERNELS, "start", *TIME)
    first = db.execute(f"select min(start) from {KERNELS}").fetchone()[0]
    if first is None or first >= EPOCH_THRESHOLD_NS:
        offset = 0  # --ts-normalize: already UTC epoch
    elif start_epoch:
        offset = start_epoch
    else:
        raise HostTraceError(
            f"{path}: session-relative times and no TARGET_INFO_SESSION_START_TIME: cannot place them on REALTIME"
        )
    check.times(KERNELS, offset)
    for column, lo, hi in (
        ("deviceId", 0, (1 << 31) - 1),
        ("streamId", 0, I64[1]),
        ("gridX", 0, (1 << 32) - 1),
        ("gridY", 0, (1 << 32) - 1),
        ("gridZ", 0, (1 << 32) - 1),
        ("blockX", 0, (1 << 32) - 1),
        ("blockY", 0, (1 << 32) - 1),
        ("blockZ", 0, (1 << 32) - 1),
    ):
        check.whole(KERNELS, column, lo, hi)
    check.whole(KERNELS, "correlationId", *I64, nullable=True)
    check.whole(KERNELS, name_col, *I64, nullable=True)
    name_refs = [f"select {name_col} from {KERNELS}"]
    runtime = RUNTIME in tables
    if runtime:
        check.times(RUNTIME, offset)
        check.whole(RUNTIME, "globalTid", 0, I64[1])
        check.whole(RUNTIME, "correlationId", *I64, nullable=True)
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
    # Only the strings something here refers to.
    strings = dict(
        db.execute(f"select id, cast(value as text) from StringIds where id in ({' union '.join(name_refs)})")
    )

    def name_of(i):
        return strings.get(i, f"string#{i}") if i is not None else ""

    b = HostTraceBuilder()
    for start, end, dev, stream, corr, name_id, gx, gy, gz, bx, by, bz in db.execute(
        f"select start, end, deviceId, streamId, coalesce(correlationId, -1), {name_col}, gridX, gridY, gridZ, "
        f"blockX, blockY, blockZ from {KERNELS}"
    ):
        b.kernel(dev, stream, name_of(name_id), (gx, gy, gz), (bx, by, bz), start + offset, end - start, corr)
    if runtime:
        for start, end, gtid, name_id in db.execute(f"select start, end, globalTid, nameId from {RUNTIME}"):
            b.event(("thread", *pid_tid(gtid)), name_of(name_id), start + offset, end - start, "cuda_runtime")
    if nvtx:
        for start, end, etype, text, tid_text, gtid in db.execute(
            f"select start, end, eventType, cast(text as text), {text_id}, globalTid from {NVTX} where {NVTX_USED}"
        ):
            label = text if text is not None else name_of(tid_text)
            dur = end - start if end is not None and etype != NVTX_MARK else 0
            b.event(("nvtx", *pid_tid(gtid)), label, start + offset, dur, "nvtx")
    thread_names = {}
    if names:
        for name_id, gtid in db.execute("select nameId, globalTid from ThreadNames"):
            thread_names[pid_tid(gtid)] = name_of(name_id)
    return b.build(path, "nsys", thread_names)


def load_host_trace(path) -> HostTrace:
    """A PyTorch-profiler JSON or an nsys SQLite export, told apart by content."""
    return load_nsys(path) if is_sqlite(path) else load_kineto(path)
