"""Integer values per group (block durations per kernel) gathered a part at a time,
and the exact values at given ranks of each group's sorted values (its percentiles),
in memory that does not grow with the values: past BLOCK_VALUES they go to a
temporary file a block at a time, each block sorted by group, and a group larger
than IN_MEMORY is narrowed by histograms of its value range, one read of it each."""

from __future__ import annotations

import tempfile

import numpy as np

BLOCK_VALUES = 1 << 21  # values held before a block is written (24 MB with their groups)
IN_MEMORY = 1 << 22  # a group of at most this many values is read whole and partitioned
READ_VALUES = 1 << 21  # values read back at once
BINS = 1 << 16  # histogram bins per narrowing read


class GroupedValues:
    def __init__(self, n_groups: int):
        self.n = n_groups
        self.count = np.zeros(n_groups, np.int64)
        self.low = np.full(n_groups, np.iinfo(np.int64).max, np.int64)
        self.high = np.full(n_groups, np.iinfo(np.int64).min, np.int64)
        self.held_parts: list = []  # (groups, values) not yet in a block
        self.held_values = 0
        self.blocks: list = []  # per block: where each group's values start in the file (n + 1 offsets)
        self.file = None
        self.last = None  # the values held when reading began: (where each group starts, values by group)

    def add(self, groups: np.ndarray, values: np.ndarray) -> None:
        if len(values) == 0:
            return
        values = values.astype(np.int64)
        self.count += np.bincount(groups, minlength=self.n)[: self.n]
        np.minimum.at(self.low, groups, values)
        np.maximum.at(self.high, groups, values)
        self.held_parts.append((groups.astype(np.int32), values))
        self.held_values += len(values)
        if self.held_values >= BLOCK_VALUES:
            self._write_block()

    def _write_block(self) -> None:
        groups, values = self._held_by_group()
        if self.file is None:
            self.file = tempfile.TemporaryFile()
        base = self.file.seek(0, 2) // 8
        self.file.write(values.tobytes())
        self.blocks.append(base + np.searchsorted(groups, np.arange(self.n + 1)))
        self.held_parts, self.held_values = [], 0

    def _held_by_group(self) -> tuple:
        if not self.held_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        groups = np.concatenate([g for g, _ in self.held_parts])
        values = np.concatenate([v for _, v in self.held_parts])
        # a stable sort of 16-bit keys is a radix sort: linear in the values
        keys = groups.astype(np.uint16) if self.n <= 1 << 16 else groups
        order = np.argsort(keys, kind="stable")
        return groups[order], values[order]

    def held(self):
        """(groups, values) of every value, where none went to the file (else None)."""
        if self.file is not None:
            return None
        if not self.held_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate([g for g, _ in self.held_parts]), np.concatenate([v for _, v in self.held_parts])

    def parts(self, group: int):
        """The values of one group, at most READ_VALUES at a time, in no useful order."""
        if self.last is None:  # what is held, sorted by group once, with where each group starts
            groups, values = self._held_by_group()
            self.last = (np.searchsorted(groups, np.arange(self.n + 1)), values)
            self.held_parts, self.held_values = [], 0
        for starts in self.blocks:
            lo, hi = int(starts[group]), int(starts[group + 1])
            for at in range(lo, hi, READ_VALUES):
                n = min(READ_VALUES, hi - at)
                out = np.empty(n, np.int64)
                self.file.seek(at * 8)
                self.file.readinto(memoryview(out.view(np.uint8)))
                yield out
        starts, values = self.last
        lo, hi = int(starts[group]), int(starts[group + 1])
        if hi > lo:
            yield values[lo:hi]

    def at_ranks(self, group: int, ranks: np.ndarray) -> np.ndarray:
        """The values at these ranks (0-based) of the group's values sorted."""
        ranks = np.asarray(ranks, np.int64)
        if len(ranks) == 0:
            return np.zeros(0, np.int64)
        if int(self.count[group]) <= IN_MEMORY:
            values = np.concatenate(list(self.parts(group)))
            return np.partition(values, np.unique(ranks))[ranks]
        return self._narrowed(group, ranks.tolist())

    def _narrowed(self, group: int, ranks: list) -> np.ndarray:
        """The values at `ranks`, each by histograms of a range that holds it, BINS times
        narrower a read, until a bin is one value wide; one read per step for all ranks."""
        # per rank: [lo, hi, values below lo]
        ranges = {r: [int(self.low[group]), int(self.high[group]), 0] for r in ranks}
        found = {}
        while ranges:
            keys = sorted({(lo, hi) for lo, hi, _ in ranges.values()})
            hists = {k: np.zeros(BINS, np.int64) for k in keys}
            for part in self.parts(group):
                for lo, hi in keys:
                    width = -(-(hi - lo + 1) // BINS)  # ceil: BINS bins cover lo..hi
                    inside = part[(part >= lo) & (part <= hi)]
                    hists[(lo, hi)] += np.bincount((inside - lo) // width, minlength=BINS)[:BINS]
            for r, (lo, hi, below) in list(ranges.items()):
                width = -(-(hi - lo + 1) // BINS)
                cum = below + np.cumsum(hists[(lo, hi)])
                b = int(np.searchsorted(cum, r, side="right"))
                below = int(cum[b - 1]) if b else below
                lo, hi = lo + b * width, min(hi, lo + (b + 1) * width - 1)
                if width == 1:
                    found[r] = lo
                    del ranges[r]
                else:
                    ranges[r] = [lo, hi, below]
        return np.array([found[r] for r in ranks], np.int64)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
