"""What `info`, `stats` and `diff` read of a recording's events, from one pass over a
WindowedRecording (event_pass.py) that holds a segment at a time: the launch table
(launch_tally.py), the events of no launch, per kernel its memory samples, SMs and
block-duration percentiles (grouped_values.py), and the reader's blocks-open-at-once
check (overlap_bound.py). Value for value what the in-memory path gives
(tests/test_streamed_analysis.py).

Used for recordings read without --salvage whose blocks have recorded ends or none
(not block_starts: its end bounds need every block of a window at once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..recording_file import schema
from ..recording_file.overlap_bound import OverlapBound
from ..recording_file.windows import WindowedRecording
from . import launches as analysis
from .block_ends import is_block_starts
from .event_pass import resolved_segments
from .grouped_values import GroupedValues
from .launch_tally import LaunchTally

PAIR_GRID_CELLS = 50_000_000  # a kernels x SMs grid of seen pairs up to this size, else sorted pairs


def can_stream(wr: WindowedRecording) -> bool:
    return not is_block_starts(wr.rec)


@dataclass
class EventFacts:
    event_counts: dict  # launches.event_counts
    table: Optional[analysis.LaunchTable] = None
    figures: Optional[analysis.KernelEventFigures] = None  # per kernel of launches.kernel_groups


def gather(
    wr: WindowedRecording,
    progress: Callable = lambda *_: None,
    table: bool = True,
    kernels: bool = True,
) -> EventFacts:
    """One pass over every event of `wr` for its event counts and, as asked, its launch
    table and per-kernel figures; raises load()'s CorruptChunk where more blocks are open
    at once on an SM than any SM holds."""
    rec = wr.rec
    tally = LaunchTally(rec) if table or kernels else None
    per_kernel = None
    if kernels:
        names = analysis.launch_table(rec, np.zeros(0, np.int64)).name
        groups, kernel_of_launch = analysis.kernel_groups(rec, names)
        per_kernel = _KernelTally(len(groups), wr)
    overlap = OverlapBound(wr)
    unattributed = 0
    done, total = 0, wr.event_count
    timed = analysis.timed_blocks(rec)
    try:
        for seg in resolved_segments(wr):
            ev, idx = seg.events, seg.launch
            unattributed += int((idx < 0).sum())
            if tally is not None:
                tally.add(ev, idx)
            if per_kernel is not None:
                per_kernel.add(ev, idx, kernel_of_launch, timed)
            overlap.add(wr.chunks[seg.chunk], ev)
            done += len(ev)
            progress(f"reading the events of {wr.path}", done, total)
        overlap.check()
        kinds = sum((c.kinds for c in wr.chunks), np.zeros(256, np.int64))
        facts = EventFacts(
            {
                "block_events": int(kinds[schema.EventKind.BLOCK]),
                "memory_events": int(kinds[schema.EventKind.MEMORY]),
                "events_unattributed": unattributed,
            }
        )
        if tally is not None:
            facts.table = tally.table(rec)
        if per_kernel is not None:
            facts.figures = per_kernel.figures()
        return facts
    finally:
        if per_kernel is not None:
            per_kernel.close()


class _KernelTally:
    """kernel_event_figures a segment at a time."""

    def __init__(self, n_kernels: int, wr: WindowedRecording):
        self.n = n_kernels
        self.memory_events = np.zeros(n_kernels, np.int64)
        sms = max((c._limits[0] for c in wr.chunks if c.count), default=0) + 1
        self.seen = np.zeros((n_kernels, sms), bool) if n_kernels * sms <= PAIR_GRID_CELLS else None
        self.pairs = np.zeros(0, np.int64)  # kernel << 32 | SM, where the grid is too large
        self.durations = GroupedValues(n_kernels)

    def add(self, ev: np.ndarray, idx: np.ndarray, kernel_of_launch: np.ndarray, timed: bool) -> None:
        resolved = idx >= 0
        if not resolved.any():
            return
        kernel = kernel_of_launch[idx[resolved]]
        ev = ev if resolved.all() else ev[resolved]
        is_block = ev["kind"] == schema.EventKind.BLOCK
        self.memory_events += np.bincount(kernel[~is_block], minlength=self.n)[: self.n]
        sm = ev["sm_id"].astype(np.int64)
        if self.seen is not None:
            self.seen[kernel, sm] = True
        else:
            self.pairs = np.unique(np.concatenate([self.pairs, (kernel << 32) | sm]))
        if timed:
            self.durations.add(kernel[is_block], analysis.block_durations(ev[is_block]))

    def figures(self) -> analysis.KernelEventFigures:
        if self.seen is not None:
            sms = self.seen.sum(axis=1)
        else:
            sms = np.bincount(self.pairs >> 32, minlength=self.n)[: self.n]
        held = self.durations.held()
        if held is not None:  # all in memory: one sort of them all, as kernel_event_figures sorts
            percentiles = analysis._grouped_percentiles(held[0], held[1], self.n, analysis.PERCENTILES)
            return analysis.KernelEventFigures(self.memory_events, sms, percentiles)
        count = self.durations.count
        plan = analysis.percentile_ranks(count, analysis.PERCENTILES)
        wanted: dict = {}  # kernel -> ranks needed
        for has, prev, nxt, _ in plan.values():
            for g, a, b in zip(np.flatnonzero(has).tolist(), prev.tolist(), nxt.tolist()):
                wanted.setdefault(g, set()).update((a, b))
        found = {}
        for g, ranks in wanted.items():
            ranks = sorted(ranks)
            for r, v in zip(ranks, self.durations.at_ranks(g, np.array(ranks, np.int64)).tolist()):
                found[(g, r)] = v

        def value_at(groups, ranks):
            return np.array([found[(g, r)] for g, r in zip(groups.tolist(), ranks.tolist())], np.int64)

        percentiles = analysis.percentiles_at(plan, self.n, value_at)
        return analysis.KernelEventFigures(self.memory_events, sms, percentiles)

    def close(self) -> None:
        self.durations.close()
