"""`gpuobs trim`: the part of a recording to share. Selects whole flush windows (by
the index `gpuobs info` shows), whole launches whose span overlaps a time window
(relative to the recording's start), and launches of kernels matching a regex; the
selections combine. An empty selection is refused, never written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..ranges import format_span
from ..recording_file.recording import Recording
from . import launches as analysis
from .recording_info import device_span


class TrimError(Exception):
    pass


@dataclass
class Selection:
    flushes: np.ndarray  # rows of rec.flushes to keep
    launches: np.ndarray  # rows of rec.launches
    events: np.ndarray  # rows of rec.events

    def describe(self) -> str:
        return (
            f"{int(self.flushes.sum())} flush windows, {int(self.launches.sum()):,} launches, "
            f"{int(self.events.sum()):,} events"
        )


def _window_keys(devices, flush_seqs) -> np.ndarray:
    """One integer per (device, flush window)."""
    return (np.asarray(devices, np.int64) << 32) | np.asarray(flush_seqs, np.int64)


def select(
    rec: Recording, flushes: Optional[tuple] = None, time: Optional[tuple] = None, kernels: Optional[str] = None
) -> Selection:
    """`flushes`: (first, end) flush indices; `time`: (start, end) ns from the recording's
    first event; `kernels`: a regex on kernel names. None: no restriction. END excluded."""
    n_flush = len(rec.flushes)
    keep_flush = np.ones(n_flush, bool)
    launch_of_event = analysis.launch_index_of_events(rec)
    table = analysis.launch_table(rec, launch_of_event)
    keep_launch = np.ones(len(rec.launches), bool)
    keep_event = np.ones(len(rec.events), bool)
    resolved = launch_of_event >= 0
    if flushes is not None:
        lo, hi = flushes
        lo = 0 if lo is None else lo
        hi = n_flush if hi is None else hi
        if lo >= n_flush:
            raise TrimError(
                f"--flushes {lo}:{'' if flushes[1] is None else hi}: the recording has {n_flush} flush "
                f"windows, indices 0..{n_flush - 1} (`gpuobs info` lists them)"
            )
        keep_flush[:] = False
        keep_flush[lo:hi] = True
        chosen = _window_keys(rec.flushes["device_index"], rec.flushes["flush_seq"])[keep_flush]
        keep_launch &= np.isin(_window_keys(rec.launches["device_index"], rec.launch_flushes), chosen)
        keep_event &= np.isin(_window_keys(rec.event_devices, rec.event_flushes), chosen)
    if time is not None:
        span = device_span(rec)
        if span is None:
            mode = rec.run.mode_name if rec.run else "unknown"
            raise TrimError(
                f"--time: {rec.path} has no device times (mode {mode} keeps none); trim by --flushes or --kernels"
            )
        t0 = span[0]
        lo = t0 + (time[0] or 0)
        hi = t0 + time[1] if time[1] is not None else np.iinfo(np.int64).max
        first = table.first_start.astype(np.int64)
        last = np.maximum(table.last_end.astype(np.int64), first)
        keep_launch &= (first > 0) & (first < hi) & (last >= lo)
        starts = rec.events["time_start"].astype(np.int64)
        keep_event &= np.where(
            resolved, analysis.of_launch(keep_launch, launch_of_event, False), (starts >= lo) & (starts < hi)
        )
    if kernels is not None:
        try:
            pattern = re.compile(kernels)
        except re.error as exc:
            raise TrimError(f"--kernels {kernels!r} is not a valid regular expression: {exc}") from None
        functions = [rec.launch_function(launch) for launch in rec.launches]
        keep_launch &= np.array([bool(pattern.search(f.name) or pattern.search(f.mangled)) for f in functions], bool)
        keep_event &= resolved
    if time is not None or kernels is not None:
        keep_event &= ~resolved | analysis.of_launch(keep_launch, launch_of_event, False)
        # windows holding nothing that was chosen are left out whole
        held = np.concatenate(
            [
                _window_keys(rec.launches["device_index"], rec.launch_flushes)[keep_launch],
                _window_keys(rec.event_devices, rec.event_flushes)[keep_event],
            ]
        )
        keep_flush &= np.isin(_window_keys(rec.flushes["device_index"], rec.flushes["flush_seq"]), held)
    selection = Selection(keep_flush, keep_launch, keep_event)
    if not keep_launch.any() and not keep_event.any():
        span = device_span(rec)
        where = f" (it spans {format_span(0, span[1] - span[0])})" if span and time is not None else ""
        raise TrimError(
            f"the selection keeps nothing of {rec.path}{where}: no launch and no event; nothing was written"
        )
    return selection
