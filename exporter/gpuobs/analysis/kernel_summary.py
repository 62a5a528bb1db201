"""The per-kernel time summary that `nsys stats --report cuda_gpu_kern_sum` and the
PyTorch profiler's `key_averages().table()` lead with: per kernel, its share of
all kernel time, total, instances, and the average, median, min, max and standard
deviation of a launch's span.

A launch's span is measured on the device clock from its first block's start to
its last block's end, from the block records of a block_trace recording. It
includes what instrumentation cost inside the kernel, and excludes the launch's
queueing before its first block ran. In a block_starts recording no end is
recorded: the span runs to the latest upper bound of its blocks' ends
(block_ends.py), so it is an upper bound too, unless some block of the launch has
no bound. A launch whose latest bound is weak (it may include a wait the tool made,
a flush, a host stall: block_ends.py) is left out of the summary and counted per
kernel in `weak`: an upper bound that long says nothing about the kernel. Modes
that keep no block times (counters, memory modes) have no spans:
`timed` is False and there are no rows."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..recording_file import schema
from ..recording_file.recording import Recording
from . import launches as analysis
from .block_ends import EndBound
from .kernel_names import short_name

SPAN_MEANING = (
    "span = a launch's first block start to its last block end (device clock, from block "
    "records; includes instrumentation cost inside the kernel, not queueing before it)"
)
SPAN_MEANING_BOUNDS = (
    "span = a launch's first block start to the latest upper bound of its blocks' ends (block_starts "
    "records no block end; device clock, includes instrumentation cost inside the kernel); launches "
    "whose latest bound is weak (made by work the host enqueued after the block started, by a later "
    "flush window, or a quiet point: it may include host time, a wait the tool made, an idle device) "
    "are left out and counted in Weak"
)
SORT_KEYS = ("total", "instances", "avg", "med", "min", "max", "stddev", "name")


@dataclass
class KernelTimes:
    mode: str
    timed: bool  # the mode records block start and end times (block_starts: starts and end bounds)
    ends_are_bounds: bool = False  # block_starts: spans end at upper bounds of block ends
    rows: list = field(default_factory=list)  # one dict per kernel name, by total time
    launches: int = 0  # launches in the recording
    launches_without_span: int = 0  # no block recorded (all dropped, or outside a window)
    launches_partial: int = 0  # some blocks dropped: the span may be short
    # sampled recordings: launches recorded in part (the sample gate turned while they ran, or
    # blocks were dropped) are left out, since their spans would be short
    launches_partial_left_out: bool = False
    launches_end_unbounded: int = 0  # block_starts: a block with no end bound, so the span may be short
    launches_end_weak: int = 0  # block_starts: left out, their latest bound is weak (block_ends.py)
    device_span_ns: int = 0  # per device, its first block start to its latest start or tight end bound; summed


def kernel_times(
    rec: Recording, table: analysis.LaunchTable | None = None, block_events: int | None = None
) -> KernelTimes:
    """`block_events`: how many block records rec has, where its events are not in it."""
    mode = rec.run.mode_name if rec.run else "unknown"
    if block_events is None:
        has_blocks = bool(len(rec.events)) and bool((rec.events["kind"] == schema.EventKind.BLOCK).any())
    else:
        has_blocks = block_events > 0
    timed = schema.mode_has(mode, schema.Trait.BLOCK_RECORDS) or (rec.run is None and has_blocks)
    bounded = schema.mode_has(mode, schema.Trait.BOUNDED_ENDS)
    result = KernelTimes(mode=mode, timed=timed, launches=len(rec.launches), ends_are_bounds=bounded)
    if not timed or len(rec.launches) == 0:
        return result
    table = table or analysis.launch_table(rec)
    spanned = table.blocks_recorded > 0
    if table.end_bound is not None:
        result.launches_end_unbounded = int((spanned & (table.end_bound == EndBound.NONE)).sum())
    result.launches_without_span = int((~spanned).sum())
    partial = spanned & (table.blocks_recorded < table.grid_blocks)
    result.launches_partial = int(partial.sum())
    weak = spanned & table.end_weak if table.end_weak is not None else np.zeros(len(spanned), bool)
    if rec.totals["sampled_out"]:
        result.launches_partial_left_out = True
        spanned = spanned & ~partial
    result.launches_end_weak = int(weak.sum())
    result.device_span_ns = _device_span(rec, table, spanned & ~weak)
    spans = table.last_end.astype(np.int64) - table.first_start.astype(np.int64)
    # Grouped by name in one sort: per name, its measured spans sorted and side by side
    # (a launch ending at a weak bound names its kernel but measures nothing).
    launched = np.flatnonzero(spanned)
    groups: dict = {}
    group_all = np.array([groups.setdefault(table.name[i], len(groups)) for i in launched.tolist()], np.int64)
    weak_launched = weak[launched]
    weak_counts = np.bincount(group_all[weak_launched], minlength=len(groups))
    group = group_all[~weak_launched]
    values = np.maximum(spans[launched[~weak_launched]], 0)
    order = np.lexsort((values, group))
    ordered, counts = values[order], np.bincount(group, minlength=len(groups))
    begins = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    totals = np.zeros(len(groups), np.int64)
    np.add.at(totals, group, values)
    means = totals / np.maximum(counts, 1)
    squares = np.zeros(len(groups), np.float64)
    np.add.at(squares, group, (values - means[group]) ** 2)
    grand = int(totals.sum()) or 1
    for g, name in enumerate(groups):
        n, at = int(counts[g]), int(begins[g])
        if n == 0:  # every launch of it ends at a weak bound: nothing measured
            result.rows.append(
                {"name": name, "time_pct": 0.0, "total_ns": 0, "instances": 0, "avg_ns": None, "med_ns": None}
                | {"min_ns": None, "max_ns": None, "stddev_ns": None, "weak": int(weak_counts[g])}
            )
            continue
        middle = ordered[at + n // 2]
        median = float(middle) if n % 2 else (float(ordered[at + n // 2 - 1]) + float(middle)) / 2
        result.rows.append(
            {
                "name": name,
                "time_pct": round(100.0 * int(totals[g]) / grand, 2),
                "total_ns": int(totals[g]),
                "instances": n,
                "avg_ns": round(float(means[g]), 1),
                "med_ns": round(median, 1),
                "min_ns": int(ordered[at]),
                "max_ns": int(ordered[at + n - 1]),
                "stddev_ns": round(float(np.sqrt(squares[g] / (n - 1))), 1) if n > 1 else 0.0,
            }
        )
        if result.ends_are_bounds:
            result.rows[-1]["weak"] = int(weak_counts[g])
    sort_rows(result.rows, "total")
    return result


def _device_span(rec: Recording, table: analysis.LaunchTable, tight: np.ndarray) -> int:
    """Per device, from its first block start to the latest of its launches' last
    start-or-end-bound (tight launches only for the bounds), summed over devices."""
    total = 0
    devices = rec.launches["device_index"]
    recorded = table.blocks_recorded > 0
    for device in np.unique(devices[recorded]).tolist():
        mine = recorded & (devices == device)
        last = table.first_start[mine]
        if table.block_ends is not None:  # block_starts: the latest start of each launch
            be = table.block_ends
            ok = be.launch >= 0
            latest_start = np.zeros(len(rec.launches), np.uint64)
            np.maximum.at(latest_start, be.launch[ok], rec.events["time_start"][be.rows[ok]])
            last = latest_start[mine]
        ends = table.last_end[mine & tight] if table.block_ends is not None else table.last_end[mine]
        top = max(int(last.max()), int(ends.max()) if len(ends) else 0)
        total += top - int(table.first_start[mine].min())
    return total


def sort_rows(rows: list, key: str) -> None:
    """In place: names A..Z as shown (short_name), everything else largest first (as nsys sorts)."""
    if key == "name":
        rows.sort(key=lambda r: (short_name(r["name"]), r["name"]))
    else:
        column = {
            "total": "total_ns",
            "instances": "instances",
            "avg": "avg_ns",
            "med": "med_ns",
            "min": "min_ns",
            "max": "max_ns",
            "stddev": "stddev_ns",
        }[key]
        rows.sort(key=lambda r: (-(r[column] if r[column] is not None else -1), r["name"]))
