"""PyTorch-profiler (Kineto) Chrome-JSON traces.

Kineto converts CUPTI times to Unix REALTIME and writes `ts = (unix_ns -
baseTimeNanoseconds) / 1000` in microseconds (3 decimals); the file's top-level
`baseTimeNanoseconds` says which base. So every event's REALTIME nanoseconds are
recovered exactly (to the microsecond rounding Kineto applied).

The file is read element by element (json_stream), never whole, and every value
used is checked: a wrong type or an impossible time is an error naming the event."""

from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np

from ..input_files import describe, open_regular
from ..recording_file.recording_checks import TIME_LIMIT_NS
from . import kineto_scan
from .json_stream import JsonStreamError, read_object
from .trace import (  # noqa: F401
    EVENT,
    KERNEL,
    MAX_CATEGORY_CHARS,
    NO_DIMS,
    HostKernel,
    HostTrace,
    HostTraceBuilder,
    HostTraceError,
    assemble,
)

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")  # on a GPU stream's track
MAX_DEVICE = 1 << 31
MAX_ID = 1 << 63
MAX_DIM = 1 << 32


class _Events:
    """traceEvents elements into builder rows, times from the base (Kineto writes
    baseTimeNanoseconds after the events), with each row's traceEvents index."""

    def __init__(self, path: Path):
        self.path = path
        self.builder = HostTraceBuilder()
        self.thread_names: dict = {}
        self.process_names: dict = {}
        self.index = array("q")  # traceEvents index of each row, for errors found once the base is known

    def bad(self, i: int, message: str) -> HostTraceError:
        return HostTraceError(f"{self.path}: traceEvents[{i}]: {message}")

    def __call__(self, i: int, e) -> None:
        if not isinstance(e, dict):
            return
        ph = e.get("ph")
        if ph == "M" and e.get("name") in ("thread_name", "process_name"):
            args = e.get("args")
            name = args.get("name", "") if isinstance(args, dict) else ""
            if not isinstance(name, str):
                raise self.bad(i, f"{e['name']} args.name is {_kind(name)}, not a string")
            if e["name"] == "thread_name":
                self.thread_names[(self.ident(i, e, "pid"), self.ident(i, e, "tid"))] = name
            else:
                self.process_names[self.ident(i, e, "pid")] = name
            return
        if ph != "X":
            return
        ts = self.micros(i, e, "ts", required=True)
        dur = self.micros(i, e, "dur", required=False)
        name = e.get("name", "")
        if not isinstance(name, str):
            raise self.bad(i, f"name is {_kind(name)}, not a string")
        cat = e.get("cat", "")
        if not isinstance(cat, str) or len(cat) > MAX_CATEGORY_CHARS:
            raise self.bad(i, f"cat is {_kind(cat)}, not a category name of at most {MAX_CATEGORY_CHARS} characters")
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if cat in GPU_CATEGORIES:  # Kineto's pid is the device here, its tid the stream
            device = self.integer(i, args.get("device", e.get("pid", 0)), "device", 0, MAX_DEVICE)
            stream = self.integer(i, args.get("stream", e.get("tid", 0)), "stream", 0, MAX_ID)
            if cat == "kernel":
                self.builder.kernel(
                    device,
                    stream,
                    name,
                    self.dims(i, args, "grid"),
                    self.dims(i, args, "block"),
                    ts,
                    dur,
                    self.integer(i, args.get("correlation", -1), "correlation", -MAX_ID, MAX_ID),
                )
            else:
                self.builder.event(("stream", device, stream), name, ts, dur, cat)
        else:
            self.builder.event(("thread", self.ident(i, e, "pid"), self.ident(i, e, "tid")), name, ts, dur, cat)
        self.index.append(i)

    def micros(self, i: int, e: dict, key: str, required: bool) -> int:
        """e[key], microseconds from the base, as whole nanoseconds."""
        if key not in e:
            if required:
                raise self.bad(i, f"no {key}")
            return 0
        value = e[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.bad(i, f"{key} is {_kind(value)}, not a number of microseconds")
        if not math.isfinite(value) or abs(value) >= TIME_LIMIT_NS / 1000:
            raise self.bad(i, f"{key} {value!r} us is outside 0 .. 2^62 ns (the clock's 1970 to 2116)")
        if value < 0:
            raise self.bad(
                i,
                f"negative {key} {value!r}: Kineto writes times after baseTimeNanoseconds and durations of at least 0",
            )
        return round(value * 1000)

    def integer(self, i: int, value, what: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
            raise self.bad(i, f"args.{what} is {_kind(value)}, not a whole number in [{lo:,}, {hi:,})")
        return value

    def ident(self, i: int, e: dict, key: str):
        """A pid or tid: Kineto writes numbers, or names ("Spans")."""
        value = e.get(key)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not -MAX_ID <= value < MAX_ID:
            raise self.bad(i, f"{key} is {_kind(value)}, not a whole number or a name")
        return value

    def dims(self, i: int, args: dict, key: str) -> tuple:
        value = args.get(key)
        if value is None:
            return NO_DIMS
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_DIM for v in value)
        ):
            raise self.bad(i, f"args.{key} is {_kind(value)}, not three whole numbers below 2^32")
        return tuple(value)

    def check_ends(self, base: int) -> None:
        ends = self.builder.end_ns()
        if len(ends) and int(ends.max()) >= TIME_LIMIT_NS - base:
            row = int(np.argmax(ends))
            raise self.bad(
                self.index[row],
                f"ends at {base + int(ends[row]):,} ns on REALTIME (from "
                f"baseTimeNanoseconds {base:,}), after 2^62 ns (2116)",
            )


def _kind(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def load_kineto(path) -> HostTrace:
    path = Path(path)
    lib = kineto_scan.library()
    if lib is not None:
        try:
            return _load(path, kineto_scan.Scan(lib))
        except kineto_scan.ScanStopped:
            pass  # read again in Python, which says what is wrong where
    return _load(path, None)


def _load(path: Path, scan) -> HostTrace:
    """The trace read in Python, event by event, or (with `scan`) in C."""
    events = _Events(path)
    try:
        with open_regular(path) as fh:
            members = read_object(fh, "traceEvents", events, scan)
    except OSError as exc:
        raise HostTraceError(f"{path}: cannot read: {describe(exc)}") from None
    except JsonStreamError as exc:
        raise HostTraceError(f"{path}: not JSON ({exc})") from None
    if "traceEvents" not in members:
        raise HostTraceError(f"{path}: no traceEvents list: not a PyTorch-profiler (Kineto) trace")
    base = members.get("baseTimeNanoseconds")
    if isinstance(base, bool) or not isinstance(base, int):
        raise HostTraceError(
            f"{path}: no integer baseTimeNanoseconds (found {_kind(base)}): cannot place its events on REALTIME"
        )
    if not 0 <= base < TIME_LIMIT_NS:
        raise HostTraceError(f"{path}: baseTimeNanoseconds {base:,} is outside 0 .. 2^62 ns (1970 to 2116)")
    if scan is not None:
        return _scanned_trace(path, scan.events(), base)
    events.check_ends(base)
    return events.builder.build(
        path, "pytorch-profiler", events.thread_names, base_ns=base, offset_ns=base, process_names=events.process_names
    )


def _scanned_trace(path: Path, found: kineto_scan.ScannedEvents, base: int) -> HostTrace:
    """The rows kineto_scan.c read, as _Events would have built them."""
    rows = found.rows
    meta = rows["kind"] >= kineto_scan.THREAD_NAME
    thread_names, process_names = {}, {}
    for kind, track, name in rows[meta][["kind", "track", "name"]].tolist():
        _, pid, tid = found.key(track)
        if kind == kineto_scan.THREAD_NAME:
            thread_names[(pid, tid)] = found.text(name)
        else:
            process_names[pid] = found.text(name)
    rows = rows[~meta]
    ends = rows["start_ns"] + rows["dur_ns"]
    if len(ends) and int(ends.max()) >= TIME_LIMIT_NS - base:
        row = int(np.argmax(ends))
        raise HostTraceError(
            f"{path}: traceEvents[{int(rows['index'][row])}]: ends at {base + int(ends[row]):,} ns on REALTIME "
            f"(from baseTimeNanoseconds {base:,}), after 2^62 ns (2116)"
        )
    empty = len(found.strings) - 1  # code -1, "", is the last string
    events = np.zeros(len(rows), EVENT)
    events["start_ns"], events["dur_ns"], events["track"] = rows["start_ns"], rows["dur_ns"], rows["track"]
    events["name"] = np.where(rows["name"] < 0, empty, rows["name"])
    events["category"] = np.where(rows["category"] < 0, empty, rows["category"])
    is_kernel = rows["is_kernel"] == 1
    k = rows[is_kernel]
    kernels = np.zeros(len(k), KERNEL)
    kernels["device"], kernels["stream"], kernels["name"] = k["owner"], k["lane"], events["name"][is_kernel]
    kernels["grid"], kernels["block"], kernels["correlation"] = k["grid"], k["block"], k["correlation"]
    kernels["start_ns"], kernels["dur_ns"] = k["start_ns"], k["dur_ns"]
    tracks = [found.key(t) for t in range(len(found.tracks))]
    return assemble(
        path,
        "pytorch-profiler",
        events,
        kernels,
        found.strings,
        tracks,
        found.strings,
        thread_names,
        base_ns=base,
        offset_ns=base,
        process_names=process_names,
    )
