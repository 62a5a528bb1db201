"""Builds an Nsight Systems SQLite export (`nsys export --type sqlite`) from a
real PyTorch-profiler run, for tests. Nsight Systems does not produce reports on
the lent GPU machine, so the fixture is written here: the documented tables
(CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS, StringIds,
ThreadNames, TARGET_INFO_SESSION_START_TIME, TARGET_INFO_GPU) with nsys's
columns, filled with that run's kernels and runtime calls; its PyTorch ops
become NVTX push/pop ranges, as `torch.autograd.profiler.emit_nvtx` makes them."""

import json
import sqlite3
from pathlib import Path

SCHEMA = """
create table StringIds (id integer primary key, value text not null);
create table ThreadNames (nameId integer not null, priority integer, globalTid integer);
create table TARGET_INFO_SESSION_START_TIME (utcEpochNs integer, utcTime text, localTime text);
create table TARGET_INFO_GPU (id integer, name text, busLocation text, isDiscrete integer, l2CacheSize integer,
    totalMemory integer, memoryBandwidth integer, clockRate integer, smCount integer, pwGpuId integer,
    uuid text, luid integer, chipName text, cuDevice integer, ctxId integer);
create table CUPTI_ACTIVITY_KIND_KERNEL (start integer not null, end integer not null, deviceId integer not null,
    contextId integer, streamId integer not null, correlationId integer, globalPid integer, demangledName integer,
    shortName integer, mangledName integer, launchType integer, cacheConfig integer, registersPerThread integer,
    gridX integer, gridY integer, gridZ integer, blockX integer, blockY integer, blockZ integer,
    staticSharedMemory integer, dynamicSharedMemory integer, localMemoryPerThread integer,
    localMemoryTotal integer, gridId integer, sharedMemoryExecuted integer, graphNodeId integer,
    sharedMemoryLimitConfig integer);
create table CUPTI_ACTIVITY_KIND_RUNTIME (start integer not null, end integer not null, eventClass integer,
    globalTid integer, correlationId integer, nameId integer not null, returnValue integer, callchainId integer);
create table NVTX_EVENTS (start integer not null, end integer, eventType integer not null, rangeId integer,
    category integer, color integer, text text, globalTid integer, endGlobalTid integer, textId integer,
    domainId integer, uint64Value integer, int64Value integer, doubleValue real, uint32Value integer,
    int32Value integer, floatValue real, jsonTextId integer, jsonText text);
"""


def global_tid(pid: int, tid: int) -> int:
    return (pid << 24) | tid


def build(kineto_json: Path, out: Path, ts_normalize: bool) -> dict:
    doc = json.loads(Path(kineto_json).read_text())
    base = doc["baseTimeNanoseconds"]
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]

    def realtime(e):
        return base + round(float(e["ts"]) * 1000)

    def duration(e):
        return round(float(e.get("dur", 0)) * 1000)

    session_start = min(realtime(e) for e in events) - 1_000_000
    ts = (lambda t: t) if ts_normalize else (lambda t: t - session_start)
    strings = {}

    def sid(s):
        return strings.setdefault(s, len(strings) + 1)

    kernel_pid = next(e["pid"] for e in events if e.get("cat") == "cpu_op")
    db = sqlite3.connect(out)
    db.executescript(SCHEMA)
    db.execute("insert into TARGET_INFO_SESSION_START_TIME values (?, ?, ?)", (session_start, "", ""))
    db.execute("insert into TARGET_INFO_GPU (id, name, smCount, cuDevice) values (0, 'NVIDIA H200', 132, 0)")
    counts = {"kernels": 0, "runtime": 0, "nvtx": 0}
    threads = set()
    for e in events:
        cat, args, t = e.get("cat"), e.get("args", {}), realtime(e)
        if cat == "kernel":
            g, b = args["grid"], args["block"]
            db.execute(
                "insert into CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
                "correlationId, globalPid, demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, "
                "blockZ, gridId) values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    ts(t),
                    ts(t) + duration(e),
                    args["device"],
                    1,
                    args["stream"],
                    args["correlation"],
                    global_tid(kernel_pid, 0),
                    sid(e["name"]),
                    sid(e["name"].split("(")[0][-60:]),
                    *g,
                    *b,
                    counts["kernels"] + 1,
                ),
            )
            counts["kernels"] += 1
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            db.execute(
                "insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?,?,?,?,?,?,?,?)",
                (
                    ts(t),
                    ts(t) + duration(e),
                    0,
                    global_tid(e["pid"], e["tid"]),
                    args.get("correlation", 0),
                    sid(e["name"]),
                    0,
                    0,
                ),
            )
            counts["runtime"] += 1
            threads.add((e["pid"], e["tid"]))
        elif cat == "cpu_op":
            db.execute(
                "insert into NVTX_EVENTS (start, end, eventType, text, globalTid) values (?,?,?,?,?)",
                (ts(t), ts(t) + duration(e), 59, e["name"], global_tid(e["pid"], e["tid"])),
            )
            counts["nvtx"] += 1
    for pid, tid in threads:
        db.execute("insert into ThreadNames values (?, 0, ?)", (sid("python3"), global_tid(pid, tid)))
    db.executemany("insert into StringIds values (?, ?)", [(i, s) for s, i in strings.items()])
    db.commit()
    db.close()
    return counts
