"""`gpuobs trim` over a recording read window by window (recording_file/windows.py):
the selection trim.select makes of the loaded recording, and the events it keeps, in
memory that does not grow with the events. One pass over every event sums the launch
table (streamed_facts.gather: a time window keeps whole launches by their span); a
second, over the windows that can hold a kept event, spools the kept events to a
temporary file, chunk by chunk, for copy_recording to write. The trimmed recording is
the loaded path's, byte for byte (tests/test_streamed_analysis.py)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..errors import SelectionError, TrimError
from ..ranges import format_span
from ..recording_file import schema
from ..recording_file.recording_writer import RecordingWriter
from ..recording_file.windows import WindowedRecording
from ..selection import (
    TimeMeaning,
    _chosen_flushes,
    check_time_applies,
    chosen_window_keys,
    event_mask,
    matched_launches,
    owners,
    time_selection,
    window_keys,
)
from . import streamed_facts
from .event_pass import resolved_segments
from .trim import criteria as trim_criteria

_SIZE = schema.EVENT_DTYPE.itemsize
READ_ROWS = 1 << 18  # kept events read back from the spool at once


@dataclass
class StreamedTrim:
    """trim.select's Selection of a windowed recording: `flushes` and `launches` masks,
    and `events`, the kept events per chunk (copy_recording's KeptEvents)."""

    wr: WindowedRecording
    criteria: object
    launches: np.ndarray
    events: "SpooledEvents"
    flushes: np.ndarray = field(default=None)

    @property
    def empty(self) -> bool:
        return not self.launches.any() and self.events.total == 0

    def describe(self) -> str:
        return (
            f"{int(self.flushes.sum())} flush windows, {int(self.launches.sum()):,} launches, "
            f"{self.events.total:,} events"
        )

    def nothing_kept(self) -> str:
        span = self.wr.span()
        where = f" (it spans {format_span(0, span[1] - span[0])})" if span and self.criteria.time else ""
        return f"the selection keeps nothing of {self.wr.path}{where}: no launch and no event; nothing was written"

    def close(self) -> None:
        self.events.close()


class SpooledEvents:
    """Kept events per chunk in a temporary file, each chunk's in one run, in order."""

    def __init__(self, wr: WindowedRecording):
        self.devices = [c.device for c in wr.chunks]
        self.flushes = [c.flush for c in wr.chunks]
        self.counts = [c.count for c in wr.chunks]
        self.kept = [0] * len(wr.chunks)
        self.at = [0] * len(wr.chunks)  # byte offset of each chunk's run
        self.file = tempfile.TemporaryFile()
        self.size = 0

    @property
    def total(self) -> int:
        return sum(self.kept)

    def add(self, k: int, ev: np.ndarray) -> None:
        if self.kept[k] == 0:
            self.at[k] = self.size
        self.file.seek(self.size)
        self.file.write(ev.tobytes())
        self.size += ev.nbytes
        self.kept[k] += len(ev)

    def left_out(self, k: int) -> int:
        return self.counts[k] - self.kept[k]

    def _parts(self, k: int):
        for lo in range(0, self.kept[k], READ_ROWS):
            out = np.empty(min(READ_ROWS, self.kept[k] - lo), schema.EVENT_DTYPE)
            self.file.seek(self.at[k] + lo * _SIZE)
            self.file.readinto(memoryview(out.view(np.uint8)))
            yield out

    def write(self, w: RecordingWriter, k: int) -> None:
        if self.kept[k]:
            w.events_in_parts(
                lambda: self._parts(k), self.kept[k], device_index=self.devices[k], flush_seq=self.flushes[k]
            )

    def close(self) -> None:
        self.file.close()


def select(
    wr: WindowedRecording,
    flushes: Optional[tuple] = None,
    time: Optional[tuple] = None,
    kernels: Optional[str] = None,
    progress=lambda *_: None,
) -> StreamedTrim:
    """trim.select for a windowed recording. TrimError where it keeps nothing."""
    criteria = trim_criteria(flushes, time, kernels)
    rec = wr.rec
    try:
        matched = matched_launches(rec, criteria)
        chosen = None
        if criteria.flushes is not None:
            keys = chosen_window_keys(rec, criteria.flushes)
            matched &= np.isin(window_keys(rec.launches["device_index"], rec.launch_flushes), keys)
            chosen = set(keys.tolist())
        check_time_applies(rec, criteria, wr.span())  # said before the events are read
        # every event read once, as load() reads them: its blocks-open-at-once check
        table = streamed_facts.gather(wr, progress, table=criteria.time is not None, kernels=False).table
        window, launches = time_selection(rec, criteria, table, matched, wr.span())
    except SelectionError as exc:
        raise TrimError(str(exc)) from None
    owner = owners(criteria, matched, launches)
    in_flushes = [chosen is None or int(window_keys(c.device, c.flush)) in chosen for c in wr.chunks]
    needed = _needed(wr, criteria, owner, window, in_flushes)
    kept = SpooledEvents(wr)
    total, done = sum(c.count for c, n in zip(wr.chunks, needed) if n), 0
    try:
        for seg in resolved_segments(wr, needed):
            keep = event_mask(criteria, seg.events, seg.launch, window, owner, in_flushes[seg.chunk])
            if keep.any():
                kept.add(seg.chunk, seg.events if keep.all() else seg.events[keep])
            done += len(seg.events)
            progress(f"choosing the events of {wr.path} to keep", done, total)
    except BaseException:
        kept.close()
        raise
    sel = StreamedTrim(wr, criteria, launches, kept)
    sel.flushes = _flush_mask(wr, criteria, launches, kept, chosen)
    if sel.empty:
        sel.close()
        raise TrimError(sel.nothing_kept())
    return sel


def _needed(wr: WindowedRecording, criteria, owner: np.ndarray, window, in_flushes: list) -> list:
    """Per chunk: whether it can hold a kept event. Events of a launch are in the window
    that lists it or one next to it (analysis/launches.py); with a time window, an event
    of no launch is kept by its own start."""
    rec = wr.rec
    need = [c.count > 0 and ok for c, ok in zip(wr.chunks, in_flushes)]
    if not (criteria.by_launch or criteria.time is not None):
        return need
    lf = rec.launch_flushes[owner].astype(np.int64)
    dev = rec.launches["device_index"][owner].astype(np.int64)
    near = {(d, f + k) for d, f in zip(dev.tolist(), lf.tolist()) for k in (-1, 0, 1)}
    out = []
    for c, n in zip(wr.chunks, need):
        alone = (
            not criteria.by_launch
            and window is not None
            and criteria.time_meaning is TimeMeaning.OVERLAPS
            and c.max_start >= window[0]
            and c.min_start < window[1]
        )
        out.append(n and ((c.device, c.flush) in near or alone))
    return out


def _flush_mask(wr: WindowedRecording, criteria, launches: np.ndarray, kept: SpooledEvents, chosen) -> np.ndarray:
    """selection._flush_mask: the chosen windows that hold a kept launch or event."""
    rec = wr.rec
    keys = window_keys(rec.flushes["device_index"], rec.flushes["flush_seq"])
    keep = np.ones(len(rec.flushes), bool)
    if chosen is not None:
        keep &= _chosen_flushes(rec, criteria.flushes)
    if criteria.time is not None or criteria.by_launch:
        held = np.concatenate(
            [
                window_keys(rec.launches["device_index"], rec.launch_flushes)[launches],
                window_keys(
                    [c.device for c, n in zip(wr.chunks, kept.kept) if n],
                    [c.flush for c, n in zip(wr.chunks, kept.kept) if n],
                ),
            ]
        )
        keep &= np.isin(keys, held)
    return keep
