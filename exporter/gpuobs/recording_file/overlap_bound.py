"""The reader's blocks-open-at-once check (recording_checks.deepest_block_overlap, as
load() runs it) for a recording read window by window, fed a segment at a time.

Per (device, SM), the blocks that touch each of a fixed number of time bins across the
recording's span are counted (a difference array, a few MB whatever the events): no
more blocks are open at once than touch one bin, so an SM whose every bin has at most
MAX_BLOCK_OVERLAP passes as it does in load(). Only SMs over it (a hostile file, or a
span too long for the bins to tell) are measured exactly, by deepest_block_overlap over
the file, so the error, when there is one, is load()'s own."""

from __future__ import annotations

import numpy as np

from ..errors import CorruptChunk
from . import event_index
from . import recording_checks as checks
from .windows import EventChunk, WindowedRecording

CELLS = 1 << 20  # (SM, bin) counters in all


class OverlapBound:
    def __init__(self, wr: WindowedRecording):
        self.wr = wr
        span = wr.span()
        self.devices = sorted({c.device for c in wr.chunks if c.count})
        self.sms = max((c._limits[0] for c in wr.chunks if c.count), default=0) + 1
        groups = max(len(self.devices) * self.sms, 1)
        self.bins = max(1, min(1 << 16, CELLS // groups))
        self.t0 = span[0] if span else 0
        self.width = -(-(span[1] - span[0] + 1) // self.bins) if span else 1
        self.row_of_device = {d: i for i, d in enumerate(self.devices)}
        self.diff = np.zeros(groups * (self.bins + 1), np.int64)
        self.lib = event_index.library()

    def add(self, chunk: EventChunk, ev: np.ndarray) -> None:
        if self.lib is not None:  # one pass in C (event_index.c), the same counts
            sm_row = self.row_of_device[chunk.device] * self.sms
            event_index.overlap_bins(self.lib, ev, sm_row, self.bins, self.t0, self.width, self.diff)
            return
        rows, start, end = checks.block_span(ev)
        if len(rows) == 0:
            return
        row = self.row_of_device[chunk.device] * self.sms + ev["sm_id"][rows].astype(np.int64)
        base = row * (self.bins + 1)
        first = (start - self.t0) // self.width
        last = (np.maximum(end - 1, start) - self.t0) // self.width  # [start, end): touching blocks do not overlap
        n = len(self.diff)
        if len(rows) * 16 < n:  # a few blocks: a full-size count would cost more than they do
            np.add.at(self.diff, base + first, 1)
            np.add.at(self.diff, base + last + 1, -1)
        else:
            self.diff += np.bincount(base + first, minlength=n)
            self.diff -= np.bincount(base + last + 1, minlength=n)

    def _over(self) -> np.ndarray:
        """The rows (device, SM) whose bound passes checks.MAX_BLOCK_OVERLAP."""
        touching = np.cumsum(self.diff.reshape(-1, self.bins + 1), axis=1).max(axis=1)
        return np.flatnonzero(touching > checks.MAX_BLOCK_OVERLAP)

    def crowded(self, device: int) -> bool:
        """Whether some SM of `device` may have more blocks open at once than any SM holds
        (False: deepest_block_overlap over any of the blocks added finds none)."""
        if device not in self.row_of_device:
            return False
        return bool((self._over() // self.sms == self.row_of_device[device]).any())

    def check(self) -> None:
        """Raises load()'s CorruptChunk where some SM has more blocks open at once than
        any SM holds (checks.MAX_BLOCK_OVERLAP)."""
        over = self._over()
        if len(over) == 0:
            return
        groups = np.sort(
            np.array([self.devices[g // self.sms] * checks.SM_ID_LIMIT + g % self.sms for g in over.tolist()], np.int32)
        )
        chunks = self.wr.chunks
        depth, at, row = checks.deepest_block_overlap(self.wr.lazy_chunks(), [c.device for c in chunks], groups)
        if depth > checks.MAX_BLOCK_OVERLAP:
            chunk = chunks[at]
            sm = int(self.wr.read(chunk, row, row + 1)[0]["sm_id"])
            raise CorruptChunk(
                self.wr.path,
                chunk.offset,
                f"EVENTS chunk: event {row}: {depth:,} blocks are open at once on SM {sm} of device "
                f"{chunk.device} (at most {checks.MAX_BLOCK_OVERLAP:,}; an SM keeps at most 32 blocks resident)",
            )
