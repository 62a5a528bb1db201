"""PyTorch-profiler (Kineto) Chrome-JSON traces.

Kineto converts CUPTI times to Unix REALTIME and writes `ts = (unix_ns -
baseTimeNanoseconds) / 1000` in microseconds (3 decimals); the file's top-level
`baseTimeNanoseconds` says which base. So every event's REALTIME nanoseconds are
recovered exactly (to the microsecond rounding Kineto applied)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


class HostTraceError(Exception):
    pass


@dataclass
class HostEvent:
    track: tuple          # ("thread", pid, tid) or ("stream", device, stream)
    name: str
    start_ns: int         # REALTIME
    dur_ns: int
    category: str
    args: dict = field(default_factory=dict)


@dataclass
class HostKernel:
    device: int
    stream: int
    name: str
    grid: tuple
    block: tuple
    start_ns: int
    dur_ns: int
    correlation: int


@dataclass
class HostTrace:
    path: str
    kind: str                       # "pytorch-profiler"
    events: list                    # HostEvent, kernels included
    kernels: list                   # HostKernel, in start order
    thread_names: dict = field(default_factory=dict)  # (pid, tid) -> name
    clock: str = "REALTIME"
    process_names: dict = field(default_factory=dict)  # pid -> name


def _dims(value) -> tuple:
    if isinstance(value, (list, tuple)) and len(value) == 3:
        return tuple(int(v) for v in value)
    return ()


def load_kineto(path) -> HostTrace:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise HostTraceError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise HostTraceError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise HostTraceError(f"{path}: no traceEvents list: not a PyTorch-profiler (Kineto) trace")
    base = doc.get("baseTimeNanoseconds")
    if not isinstance(base, int):
        raise HostTraceError(f"{path}: no integer baseTimeNanoseconds: cannot place its events on REALTIME")
    events, kernels, names, processes = [], [], {}, {}
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "thread_name":
            names[(e.get("pid"), e.get("tid"))] = str(e.get("args", {}).get("name", ""))
            continue
        if ph == "M" and e.get("name") == "process_name":
            processes[e.get("pid")] = str(e.get("args", {}).get("name", ""))
            continue
        if ph != "X":
            continue
        try:
            start = base + round(float(e["ts"]) * 1000)
            dur = round(float(e.get("dur", 0)) * 1000)
        except (KeyError, TypeError, ValueError):
            raise HostTraceError(f"{path}: traceEvents[{i}] has no numeric ts/dur") from None
        cat = str(e.get("cat", ""))
        args = e.get("args", {}) if isinstance(e.get("args"), dict) else {}
        name = str(e.get("name", ""))
        if cat in GPU_CATEGORIES:  # on a GPU stream: Kineto's pid is the device, its tid the stream
            device = int(args.get("device", e.get("pid", 0)))
            stream = int(args.get("stream", e.get("tid", 0)))
            if cat == "kernel":
                kernels.append(HostKernel(device, stream, name, _dims(args.get("grid")), _dims(args.get("block")),
                                          start, dur, int(args.get("correlation", -1))))
            track = ("stream", device, stream)
        else:
            track = ("thread", e.get("pid"), e.get("tid"))
        events.append(HostEvent(track, name, start, dur, cat, args))
    kernels.sort(key=lambda k: k.start_ns)
    return HostTrace(str(path), "pytorch-profiler", events, kernels, names, process_names=processes)
