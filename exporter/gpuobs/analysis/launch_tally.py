"""launches.launch_table's per-event figures (first start, last end, blocks, memory
events, unconfirmed ends, SMs touched per launch) summed a segment of events at a
time, for the analyses that read a recording window by window: what is held is per
launch, not per event. The table is launch_table's, value for value."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..recording_file import recording_checks as checks
from ..recording_file import schema
from . import launches as analysis

SM_PAIRS_HELD = 1 << 22  # (launch, SM) pairs gathered before they are made unique


class LaunchTally:
    """launch_table's per-event figures, summed a segment at a time."""

    def __init__(self, rec):
        n = len(rec.launches)
        sm_ids = max(checks.sm_limits(rec.devices).values(), default=checks.SM_ID_LIMIT)
        self.first_start = np.full(n, np.iinfo(np.uint64).max, np.uint64)
        self.last_end = np.zeros(n, np.uint64)
        self.blocks = np.zeros(n, np.int64)
        self.kept = np.zeros(n, np.int64)
        self.unconfirmed = np.zeros(n, np.int64)
        self.pairs: list = []
        self.held = 0
        self.n = n
        self.seen = np.zeros((n, sm_ids), bool) if n * sm_ids <= 50_000_000 else None

    def add(self, ev: np.ndarray, idx: np.ndarray) -> None:
        ok = idx >= 0
        if not ok.any():
            return
        if not ok.all():
            ev, idx = ev[ok], idx[ok]
        starts, ends, over = analysis._spans(ev)
        np.minimum.at(self.first_start, idx, starts)
        np.maximum.at(self.last_end, idx, ends)
        is_block = ev["kind"] == schema.EventKind.BLOCK
        n = self.n
        self.blocks += np.bincount(idx[is_block], minlength=n)[:n]
        self.kept += np.bincount(idx[~is_block], minlength=n)[:n]
        self.unconfirmed += np.bincount(idx[over], minlength=n)[:n]
        sm = ev["sm_id"]
        if self.seen is not None and int(sm.max()) < self.seen.shape[1]:  # as launch_table: a launch x SM grid
            self.seen[idx, sm] = True
            return
        self.pairs.append(np.unique(idx.astype(np.int64) * 65536 + sm.astype(np.int64)))
        self.held += len(self.pairs[-1])
        if self.held > SM_PAIRS_HELD:
            self.pairs = [np.unique(np.concatenate(self.pairs))]
            self.held = len(self.pairs[0])

    def table(self, rec) -> analysis.LaunchTable:
        table = analysis.launch_table(rec, np.zeros(0, np.int64))  # the per-launch figures; events below
        first = self.first_start.copy()
        first[first == np.iinfo(np.uint64).max] = 0
        if self.seen is not None:  # pairs of SMs past the grid's, if any, added to it
            for p in self.pairs:
                self.seen[p // 65536, p % 65536] = True
            sms_touched = self.seen.sum(axis=1)
        else:
            pairs = np.unique(np.concatenate(self.pairs)) if self.pairs else np.zeros(0, np.int64)
            sms_touched = np.bincount(pairs // 65536, minlength=self.n)[: self.n]
        return dataclasses.replace(
            table,
            first_start=first,
            last_end=self.last_end,
            blocks_recorded=self.blocks,
            events_kept=self.kept,
            ends_unconfirmed=self.unconfirmed,
            sms_touched=sms_touched,
        )
