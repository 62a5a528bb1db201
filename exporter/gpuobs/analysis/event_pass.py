"""A windowed recording's events (recording_file/windows.py) read a segment at a time,
in file order, each event with its launch: what launches.launch_index_of_events
answers for it with every event in memory, without holding more than a segment.

An event whose grid id names one launch of its window resolves alone (the fast path,
launches.single_launches). The rest (graph replays sharing a grid id, launches listed
a window late) resolve by the slow path over all such events of their flush window at
once, as launch_index_of_events does: where a window has any, the rest of it is read
ahead once to resolve them, then read again in order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from ..recording_file.windows import WindowedRecording
from . import launches as analysis


@dataclass
class Segment:
    chunk: int  # index into wr.chunks
    lo: int  # its first event's row in the chunk
    order: int  # its first event's place among all events (chunks in file order)
    events: np.ndarray
    launch: np.ndarray  # index into rec.launches per event, UNRESOLVED (-1) where none


def resolved_segments(wr: WindowedRecording, needed: Optional[list] = None, rows: int = 0) -> Iterator[Segment]:
    """Every event of the chunks `needed` (per chunk; None: all) in file order, at most
    `rows` (windows.SEGMENT_ROWS) at a time, segments starting at multiples of `rows`."""
    rec = wr.rec
    bases = np.cumsum([0] + [c.count for c in wr.chunks]).tolist()
    needed = [c.count > 0 for c in wr.chunks] if needed is None else needed
    ahead: dict = {}  # (device, flush) -> the slow path's answers for its events, in file order
    index = analysis.grid_index(rec) if len(rec.launches) else None
    of_window: dict = {}  # (device, flush) -> its chunks read, in file order
    for i, c in enumerate(wr.chunks):
        if needed[i] and c.count:
            of_window.setdefault((c.device, c.flush), []).append(i)
    for i, c in enumerate(wr.chunks):
        if not needed[i] or c.count == 0:
            continue
        key = (c.device, c.flush)
        for lo, ev in wr.segments(c, rows):
            if len(rec.launches) == 0:
                idx = np.full(len(ev), analysis.UNRESOLVED, np.int64)
            else:
                cand, single = analysis.single_launches(rec, ev["grid_id"], c.device, c.flush, index)
                idx = np.where(single, cand, analysis.UNRESOLVED)
                if not single.all():
                    if key not in ahead:
                        ahead[key] = _Answers(_slow_path(wr, of_window[key], i, lo, rows))
                    idx[~single] = ahead[key].take(int((~single).sum()))
                    if ahead[key].done:
                        del ahead[key]  # none of the window's events is left for it
            yield Segment(i, lo, bases[i] + lo, ev, idx)


class _Answers:
    """The slow path's launch indices of a window, handed out in file order."""

    def __init__(self, values: np.ndarray):
        self.values, self.at = values, 0

    def take(self, n: int) -> np.ndarray:
        part = self.values[self.at : self.at + n]
        self.at += n
        return part

    @property
    def done(self) -> bool:
        return self.at >= len(self.values)


def _slow_path(wr: WindowedRecording, window: list, first: int, lo: int, rows: int) -> np.ndarray:
    """launch_index_of_events over the events of chunk `first`'s window (its chunks read:
    `window`) that the fast path leaves, from row `lo` of that chunk on (none before it
    does), in file order."""
    rec = wr.rec
    c0 = wr.chunks[first]
    key = (c0.device, c0.flush)
    parts = []
    for j in window[window.index(first) :]:
        c = wr.chunks[j]
        for seg_lo, ev in wr.segments(c, rows):
            if j == first and seg_lo < lo:
                continue
            _, single = analysis.single_launches(rec, ev["grid_id"], c.device, c.flush)
            if not single.all():
                parts.append(ev[~single])
    ev = np.concatenate(parts) if len(parts) > 1 else parts[0]
    sub = dataclasses.replace(rec, event_chunks=[ev], event_chunk_devices=[key[0]], event_chunk_flushes=[key[1]])
    return analysis.launch_index_of_events(sub)
