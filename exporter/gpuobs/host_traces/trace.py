"""A host trace once read: events and kernels as numpy columns, names, tracks and
categories stored once each. A 200 MB trace holds millions of events; as Python
objects they took ten times the file, as columns they take a fraction of it."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from ..recording_file.recording_checks import TIME_LIMIT_NS

EVENT = np.dtype([("start_ns", "<i8"), ("dur_ns", "<i8"), ("track", "<i4"), ("name", "<i4"), ("category", "<i4")])
KERNEL = np.dtype([("device", "<i8"), ("stream", "<i8"), ("name", "<i4"), ("grid", "<i8", (3,)),
                   ("block", "<i8", (3,)), ("start_ns", "<i8"), ("dur_ns", "<i8"), ("correlation", "<i8")])
NO_DIMS = (-1, -1, -1)  # grid or block not given: matches no launch
MAX_CATEGORY_CHARS = 64  # categories are short names ("kernel", "cpu_op"); each event carries its own copy


class HostTraceError(Exception):
    pass


@dataclass
class HostEvent:
    """One event of a host trace, as a record."""

    track: tuple          # ("thread"|"nvtx", pid, tid) or ("stream", device, stream)
    name: str
    start_ns: int         # REALTIME
    dur_ns: int
    category: str


@dataclass
class HostKernel:
    """One kernel of a host trace, as a record (matching hands these out)."""

    device: int
    stream: int
    name: str
    grid: tuple
    block: tuple
    start_ns: int         # REALTIME
    dur_ns: int
    correlation: int


@dataclass
class HostTrace:
    path: str
    kind: str                       # "pytorch-profiler" or "nsys"
    events: np.ndarray              # EVENT rows, kernels included; times on REALTIME
    kernels: np.ndarray             # KERNEL rows, in start order
    names: list                     # events["name"] and kernels["name"] index this
    tracks: list                    # events["track"] indexes this: ("thread"|"nvtx", pid, tid) or ("stream", device, stream)
    categories: list                # events["category"] indexes this
    thread_names: dict = field(default_factory=dict)  # (pid, tid) -> name
    clock: str = "REALTIME"
    base_ns: int | None = None      # a Kineto trace's baseTimeNanoseconds
    process_names: dict = field(default_factory=dict)  # pid -> name

    def event(self, i: int) -> HostEvent:
        e = self.events[i]
        return HostEvent(self.tracks[int(e["track"])], self.names[int(e["name"])], int(e["start_ns"]),
                         int(e["dur_ns"]), self.categories[int(e["category"])])

    def kernel(self, i: int) -> HostKernel:
        k = self.kernels[i]
        return HostKernel(int(k["device"]), int(k["stream"]), self.names[int(k["name"])],
                          tuple(int(v) for v in k["grid"]), tuple(int(v) for v in k["block"]),
                          int(k["start_ns"]), int(k["dur_ns"]), int(k["correlation"]))


class HostTraceBuilder:
    """Collects events and kernels one at a time into compact columns, each name,
    track and category stored once. Callers check values first: times within
    [0, 2^62) ns, durations not negative."""

    def __init__(self):
        self._names: dict = {}
        self._tracks: dict = {}
        self._categories: dict = {}
        self._events = {name: array("q") for name in EVENT.names}
        self._kernels = {name: array("q") for name in ("device", "stream", "name", "start_ns", "dur_ns",
                                                      "correlation")}
        self._dims = array("q")  # grid then block, six per kernel

    @staticmethod
    def _intern(table: dict, key) -> int:
        index = table.get(key)
        if index is None:
            index = table[key] = len(table)
        return index

    def name(self, text: str) -> int:
        return self._intern(self._names, text)

    def event(self, track: tuple, name: str, start_ns: int, dur_ns: int, category: str) -> None:
        e = self._events
        e["start_ns"].append(start_ns)
        e["dur_ns"].append(dur_ns)
        e["track"].append(self._intern(self._tracks, track))
        e["name"].append(self.name(name))
        e["category"].append(self._intern(self._categories, category))

    def kernel(self, device: int, stream: int, name: str, grid: tuple, block: tuple, start_ns: int, dur_ns: int,
               correlation: int) -> None:
        """A kernel, also an event on its stream's track."""
        k = self._kernels
        for key, value in (("device", device), ("stream", stream), ("name", self.name(name)),
                           ("start_ns", start_ns), ("dur_ns", dur_ns), ("correlation", correlation)):
            k[key].append(value)
        self._dims.extend(grid)
        self._dims.extend(block)
        self.event(("stream", device, stream), name, start_ns, dur_ns, "kernel")

    def end_ns(self) -> np.ndarray:
        """Where each event so far ends, as given (before build's offset)."""
        return np.frombuffer(self._events["start_ns"], np.int64) + np.frombuffer(self._events["dur_ns"], np.int64)

    def build(self, path, kind: str, thread_names: dict | None = None, base_ns: int | None = None,
              offset_ns: int = 0, process_names: dict | None = None) -> HostTrace:
        """`offset_ns` is added to every start (Kineto's times are from its base)."""
        events = np.zeros(len(self._events["start_ns"]), EVENT)
        for key, column in self._events.items():
            events[key] = np.frombuffer(column, np.int64) if len(column) else 0
        kernels = np.zeros(len(self._kernels["start_ns"]), KERNEL)
        for key, column in self._kernels.items():
            kernels[key] = np.frombuffer(column, np.int64) if len(column) else 0
        dims = np.frombuffer(self._dims, np.int64).reshape(-1, 6) if len(self._dims) else np.zeros((0, 6), np.int64)
        kernels["grid"], kernels["block"] = dims[:, :3], dims[:, 3:]
        events["start_ns"] += offset_ns
        kernels["start_ns"] += offset_ns
        kernels = kernels[np.argsort(kernels["start_ns"], kind="stable")]
        return HostTrace(str(path), kind, events, kernels, list(self._names), list(self._tracks),
                         list(self._categories), thread_names or {}, base_ns=base_ns,
                         process_names=process_names or {})


def check_time(start_ns: int, dur_ns: int, where: str) -> None:
    """A host event's REALTIME start and duration, in ns, as gpuobs can place them."""
    if not 0 <= start_ns < TIME_LIMIT_NS:
        raise HostTraceError(f"{where}: starts at {start_ns:,} ns on REALTIME, outside 0 .. 2^62 (1970 to 2116)")
    if dur_ns < 0:
        raise HostTraceError(f"{where}: negative duration {dur_ns:,} ns")
    if start_ns + dur_ns >= TIME_LIMIT_NS:
        raise HostTraceError(f"{where}: ends at {start_ns + dur_ns:,} ns on REALTIME, after 2^62 (2116)")
