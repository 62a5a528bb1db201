"""Nsight Systems runs exported with `nsys export --type sqlite` (with or without
`--ts-normalize`).

Tables read (NVIDIA documents them and says they may change between versions):
CUPTI_ACTIVITY_KIND_KERNEL (kernels), CUPTI_ACTIVITY_KIND_RUNTIME (CUDA runtime
calls), NVTX_EVENTS (ranges and marks, where present), StringIds (every name is
an id into it), ThreadNames (where present), TARGET_INFO_SESSION_START_TIME (the
session's start on the UTC epoch) and TARGET_INFO_GPU (device names).

Times: without --ts-normalize they are nanoseconds from the session's start, and
utcEpochNs places them on REALTIME; with it they already are UTC-epoch ns. A
globalTid packs the process id in bits 24..47 and the thread id in bits 0..23."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from .kineto import HostEvent, HostKernel, HostTrace, HostTraceError, load_kineto

SQLITE_MAGIC = b"SQLite format 3\x00"
EPOCH_THRESHOLD_NS = 10**17  # a time above this is on the UTC epoch (after 1973), not session-relative
NVTX_RANGES = (59, 60)       # NvtxPushPopRange, NvtxStartEndRange
NVTX_MARK = 34


def is_sqlite(path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def pid_tid(global_tid: int) -> tuple[int, int]:
    return (global_tid >> 24) & 0xFFFFFF, global_tid & 0xFFFFFF


def _tables(db) -> set:
    return {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}


def _columns(db, table) -> set:
    return {r[1] for r in db.execute(f"pragma table_info({table})")}


def load_nsys(path) -> HostTrace:
    path = Path(path)
    if not is_sqlite(path):
        raise HostTraceError(f"{path}: not an SQLite file (expected `nsys export --type sqlite` output)")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = _tables(db)
    except sqlite3.Error as exc:
        raise HostTraceError(f"{path}: cannot read as SQLite: {exc}") from None
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables or "StringIds" not in tables:
        raise HostTraceError(f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL or StringIds table: not an Nsight Systems "
                             "export with CUDA trace (was it recorded with --trace=cuda?)")
    try:
        return _read(db, path, tables)
    except sqlite3.Error as exc:
        raise HostTraceError(f"{path}: {exc} (an nsys schema this reader does not know?)") from None
    finally:
        db.close()


def _read(db, path: Path, tables: set) -> HostTrace:
    strings = dict(db.execute("select id, value from StringIds"))
    name_of = lambda i: strings.get(i, f"string#{i}") if i is not None else ""  # noqa: E731
    start_epoch = 0
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = db.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()
        start_epoch = int(row[0]) if row and row[0] is not None else 0
    kcols = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in kcols else "shortName"
    rows = db.execute(f"select start, end, deviceId, streamId, correlationId, {name_col}, gridX, gridY, gridZ, "
                      "blockX, blockY, blockZ from CUPTI_ACTIVITY_KIND_KERNEL order by start").fetchall()
    first = min([r[0] for r in rows], default=0)
    if first >= EPOCH_THRESHOLD_NS:
        offset = 0  # --ts-normalize: already UTC epoch
    elif start_epoch:
        offset = start_epoch
    else:
        raise HostTraceError(f"{path}: session-relative times and no TARGET_INFO_SESSION_START_TIME: cannot place "
                             "them on REALTIME")
    events, kernels = [], []
    for start, end, dev, stream, corr, name_id, gx, gy, gz, bx, by, bz in rows:
        name = name_of(name_id)
        k = HostKernel(int(dev), int(stream), name, (int(gx), int(gy), int(gz)), (int(bx), int(by), int(bz)),
                       int(start) + offset, int(end) - int(start), int(corr))
        kernels.append(k)
        events.append(HostEvent(("stream", k.device, k.stream), name, k.start_ns, k.dur_ns, "kernel",
                                {"correlation": k.correlation, "grid": list(k.grid), "block": list(k.block)}))
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for start, end, gtid, corr, name_id in db.execute(
                "select start, end, globalTid, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"):
            pid, tid = pid_tid(int(gtid))
            events.append(HostEvent(("thread", pid, tid), name_of(name_id), int(start) + offset,
                                    int(end) - int(start), "cuda_runtime", {"correlation": int(corr)}))
    if "NVTX_EVENTS" in tables:
        ncols = _columns(db, "NVTX_EVENTS")
        text_id = "textId" if "textId" in ncols else "NULL"
        for start, end, etype, text, tid_text, gtid in db.execute(
                f"select start, end, eventType, text, {text_id}, globalTid from NVTX_EVENTS"):
            if etype not in NVTX_RANGES + (NVTX_MARK,) or gtid is None:
                continue
            pid, tid = pid_tid(int(gtid))
            label = text if text is not None else name_of(tid_text)
            dur = int(end) - int(start) if end is not None and etype != NVTX_MARK else 0
            events.append(HostEvent(("nvtx", pid, tid), label, int(start) + offset, dur, "nvtx"))
    names = {}
    if "ThreadNames" in tables:
        for name_id, gtid in db.execute("select nameId, globalTid from ThreadNames"):
            names[pid_tid(int(gtid))] = name_of(name_id)
    kernels.sort(key=lambda k: k.start_ns)
    return HostTrace(str(path), "nsys", events, kernels, names)


def load_host_trace(path) -> HostTrace:
    """A PyTorch-profiler JSON or an nsys SQLite export, told apart by content."""
    return load_nsys(path) if is_sqlite(path) else load_kineto(path)
