"""The Perfetto export's selection in bounded memory, over a WindowedRecording
(recording_file/windows.py): one pass over the flush windows a selection needs, a
segment of events at a time, that resolves each event's launch, sums the launch
table (analysis/launches.py's figures) and spools the chosen blocks to a temporary
file grouped by SM; the writer then reads back a batch of whole SMs at a time
(export.py's BATCH_BLOCKS), so what is held is one segment or one batch, not the
recording. The trace is the same, byte for byte, as the in-memory export's
(tests/test_export_streamed.py).

Used for recordings of block records with recorded ends (block_trace) exported
without --salvage, --host or --samples; other recordings take the in-memory path."""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..analysis import launches as analysis
from ..analysis.block_ends import is_block_starts
from ..analysis.launch_tally import LaunchTally
from ..recording_file import recording_checks as checks
from ..recording_file import schema, windows
from ..recording_file.overlap_bound import OverlapBound
from ..recording_file.windows import WindowedRecording
from ..selection import Criteria, TimeMeaning, matched_launches

_E = schema.EVENT_DTYPE
SPOOL_DTYPE = np.dtype(
    [
        ("order", "<u8"),  # the event's place in the recording (all chunks in file order)
        ("launch", "<i4"),  # index into rec.launches, -1 unresolved
        ("sm_id", _E["sm_id"]),
        ("time_start", _E["time_start"]),
        ("time_end", _E["time_end"]),
        ("flags", _E["flags"]),
        ("kind", _E["kind"]),
        ("function_slot", _E["function_slot"]),
        ("block_x", _E["block_x"]),
        ("block_y", _E["block_y"]),
        ("block_z", _E["block_z"]),
    ]
)


def can_stream(wr: WindowedRecording, opts, hosts) -> bool:
    """Whether export.py's streamed path gives this recording's trace: block records
    with recorded ends and nothing that needs every event at once."""
    kinds = sum((c.kinds for c in wr.chunks), np.zeros(256, np.int64))
    return (
        not hosts
        and not opts.samples
        and not is_block_starts(wr.rec)
        and int(kinds[schema.EventKind.MEMORY]) == 0
        and int(kinds.sum() - kinds[schema.EventKind.BLOCK] - kinds[0]) == 0
    )


class SmSpool:
    """A GPU's chosen blocks in a temporary file, each segment's sorted by SM, with
    where each SM's runs are: a batch of SMs is read back without the rest."""

    def __init__(self):
        self.file = tempfile.TemporaryFile()
        self.runs: dict = {}  # sm -> [(byte offset, rows)]
        self.counts: dict = {}  # sm -> rows
        self.size = 0
        self.unconfirmed = 0  # rows whose end a later run stamped (BLOCK_END_UNCONFIRMED)

    def add(self, rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        rows = rows[np.argsort(rows["sm_id"], kind="stable")]
        sm = rows["sm_id"]
        first = np.flatnonzero(np.r_[True, sm[1:] != sm[:-1]])  # sorted: runs, without np.unique's hashing
        sms, n = sm[first], np.diff(np.r_[first, len(sm)])
        self.file.seek(self.size)
        self.file.write(rows.tobytes())
        for sm, at, k in zip(sms.tolist(), first.tolist(), n.tolist()):
            self.runs.setdefault(sm, []).append((self.size + at * SPOOL_DTYPE.itemsize, k))
            self.counts[sm] = self.counts.get(sm, 0) + k
        self.size += rows.nbytes
        self.unconfirmed += int(np.count_nonzero(rows["flags"] & schema.BLOCK_END_UNCONFIRMED))

    def read(self, sms: list) -> np.ndarray:
        """The blocks of these SMs, by SM and then in recording order."""
        total = sum(self.counts[s] for s in sms)
        out = np.empty(total, SPOOL_DTYPE)
        raw = memoryview(out.view(np.uint8))
        at = 0
        for sm in sms:
            for offset, k in self.runs[sm]:
                self.file.seek(offset)
                self.file.readinto(raw[at : at + k * SPOOL_DTYPE.itemsize])
                at += k * SPOOL_DTYPE.itemsize
        key = (out["sm_id"].astype(np.uint64) << np.uint64(44)) | out["order"]
        if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):  # the common case: no slow-path rows
            return out
        return out[np.argsort(key, kind="stable")] if total < 1 << 44 else out[np.lexsort((out["order"], out["sm_id"]))]

    def close(self) -> None:
        self.file.close()


@dataclass
class StreamedSelection:
    """selection.Selection's figures for the streamed export (STARTS_IN), without
    per-event arrays: the chosen blocks are in `spools`, per GPU."""

    rec: object
    criteria: Criteria
    table: analysis.LaunchTable
    matched: np.ndarray
    launches: np.ndarray
    window: Optional[tuple]
    spools: dict = field(default_factory=dict)  # device -> SmSpool
    launch_of_event: Optional[np.ndarray] = None  # none: the events are in the spools
    # per launch: a window its events may be in was not read (the selection needs none of
    # them), so a first_start of 0 there is not "no device time"
    unread: Optional[np.ndarray] = None
    overlap: Optional[OverlapBound] = None  # of the chosen blocks: where check_overlap need not look

    def close(self) -> None:
        for spool in self.spools.values():
            spool.close()


def _needed(wr: WindowedRecording, criteria: Criteria, matched: np.ndarray, window) -> list:
    """Per chunk: whether the selection needs its events. Events of a launch are in
    the window that lists it or the one before or after it (analysis/launches.py), so
    a chunk whose window is two or more from every window of a chosen launch (or from
    every window holding the time window's events) holds nothing chosen and nothing
    of a chosen launch."""
    rec = wr.rec
    keep = [c.count > 0 for c in wr.chunks]
    if criteria.by_launch:
        lf = rec.launch_flushes[matched].astype(np.int64)
        dev = rec.launches["device_index"][matched].astype(np.int64)
        near = {(d, f + k) for d, f in zip(dev.tolist(), lf.tolist()) for k in (-1, 0, 1)}
        keep = [k and (c.device, c.flush) in near for k, c in zip(keep, wr.chunks)]
    if window is not None:
        w0, w1 = window
        before, after = {}, {}  # (device, flush) -> every chunk of it starts wholly before / after
        for c in wr.chunks:
            if c.count:
                key = (c.device, c.flush)
                before[key] = before.get(key, True) and c.max_start < w0
                after[key] = after.get(key, True) and c.min_start >= w1

        def outside(c, table):
            return all(table.get((c.device, c.flush + k), True) for k in range(-2, 3))

        keep = [k and not outside(c, before) and not outside(c, after) for k, c in zip(keep, wr.chunks)]
    return keep


def select(wr: WindowedRecording, criteria: Criteria, progress=lambda *_: None) -> StreamedSelection:
    """selection.select(rec, criteria) for the streamed export (TimeMeaning.STARTS_IN)."""
    assert criteria.time_meaning is TimeMeaning.STARTS_IN and criteria.flushes is None
    rec = wr.rec
    n = len(rec.launches)
    matched = matched_launches(rec, criteria)
    span = wr.span()
    window = None
    if criteria.time is not None and span is not None:
        t0 = span[0]
        lo, hi = criteria.time
        window = (t0 + lo if lo is not None else 0, t0 + hi if hi is not None else np.iinfo(np.uint64).max)
    tally = LaunchTally(rec)
    sel = StreamedSelection(rec, criteria, None, matched, matched, window, overlap=OverlapBound(wr))
    needed = _needed(wr, criteria, matched, window)
    ranges, grids = _zone_ranges(wr, needed, window) if window is not None else ([None] * len(wr.chunks), None)
    last_of_window = {(c.device, c.flush): i for i, c in enumerate(wr.chunks) if needed[i]}
    deferred: dict = {}  # (device, flush) -> [(chunk, rows, events)] left for the slow path
    bases = np.cumsum([0] + [c.count for c in wr.chunks])
    index = analysis.grid_index(rec) if n else None  # sorted once, not per segment

    def take(i, rows, ev, idx):
        c = wr.chunks[i]
        tally.add(ev, idx)
        resolved = idx >= 0
        keep = ev["kind"] == schema.EventKind.BLOCK
        if criteria.by_launch:
            keep &= resolved
        if window is not None:
            keep &= (ev["time_start"] >= window[0]) & (ev["time_start"] < window[1])
        if window is not None or criteria.by_launch:
            keep &= ~resolved | analysis.of_launch(matched, idx, False)
        if keep.all():  # no gather: the segment's columns as they are
            part, rows_kept, idx_kept = ev, rows, idx
        else:
            at = np.flatnonzero(keep)
            if len(at) == 0:
                return
            part, rows_kept, idx_kept = ev[at], rows[at], idx[at]
        out = np.empty(len(part), SPOOL_DTYPE)
        out["order"] = bases[i] + rows_kept
        out["launch"] = idx_kept
        for name in SPOOL_DTYPE.names[2:]:
            out[name] = part[name]
        if c.device not in sel.spools:
            sel.spools[c.device] = SmSpool()
        sel.spools[c.device].add(out)
        sel.overlap.add(c, part)

    try:
        for i, c in enumerate(wr.chunks):
            if not needed[i]:
                continue
            key = (c.device, c.flush)
            for lo, ev in wr.segments(c, ranges=ranges[i]):
                progress(f"reading flush window {c.flush} of GPU {c.device}", int(bases[i]) + lo, int(bases[-1]))
                rows = np.arange(lo, lo + len(ev), dtype=np.uint64)
                if n == 0:
                    take(i, rows, ev, np.full(len(ev), analysis.UNRESOLVED, np.int64))
                    continue
                cand, single = analysis.single_launches(rec, ev["grid_id"], c.device, c.flush, index)
                take(i, rows[single], ev[single], cand[single])
                if not single.all():
                    deferred.setdefault(key, []).append((i, rows[~single], ev[~single]))
            if last_of_window[key] == i and key in deferred:
                _resolve_deferred(rec, key, deferred.pop(key), take)
    except BaseException:
        sel.close()
        raise
    sel.table = tally.table(rec)
    skipped = {(c.device, c.flush) for c, need in zip(wr.chunks, needed) if c.count and not need}
    lf = rec.launch_flushes.astype(np.int64)
    dev = rec.launches["device_index"].astype(np.int64)
    sel.unread = (
        np.array([any((d, f + k) in skipped for k in (-1, 0, 1)) for d, f in zip(dev.tolist(), lf.tolist())], bool)
        if skipped
        else np.zeros(n, bool)
    )
    if grids is not None:  # zones were left unread: only launches of the grid ids read are whole
        sel.unread |= ~np.isin(rec.launches["grid_id"], grids)
    if window is not None:
        first = sel.table.first_start
        sel.launches = matched & (first >= window[0]) & (first < window[1])
    return sel


def _zone_ranges(wr: WindowedRecording, needed: list, window: tuple) -> tuple:
    """(per chunk, the row ranges a time window needs read; the grid ids read). Events
    are stored per SM stripe, so every zone of the index (windows.ZONE_ROWS events)
    spans a part of the run on some SMs: the zones whose start times may fall in the
    window hold every chosen block, and the grid ids of the blocks that start in it
    are those of the only launches a chosen block or kernel slice can belong to. Their
    other events, and every event that shares their grid id (graph replays resolve
    together: the slow path of launches.launch_index_of_events), are in the zones whose
    grid id range holds one of them, in flush windows within two of those read: a
    launch's events are in the window that lists it or one next to it. So each chosen
    launch is summed whole and each chosen block resolves as with every event read;
    the other events read resolve to launches that are not written."""
    w0, w1 = window
    hit, grids = {}, []
    for i, c in enumerate(wr.chunks):
        if needed[i] and c.count:
            hit[i] = (c.zones[1] >= w0) & (c.zones[0] < w1)
            for _, ev in wr.segments(c, ranges=_row_runs(hit[i], c.count)):
                start = ev["time_start"]
                grids.append(np.unique(ev["grid_id"][(start >= w0) & (start < w1)]))
    read = _with_replay_anchors(wr.rec.launches, np.unique(np.concatenate(grids)) if grids else np.zeros(0, np.uint64))
    near = {(wr.chunks[i].device, wr.chunks[i].flush + k) for i, h in hit.items() if h.any() for k in range(-2, 3)}
    ranges = []
    for i, c in enumerate(wr.chunks):
        if i not in hit:
            ranges.append([])
            continue
        zones = hit[i].copy()
        if (c.device, c.flush) in near and len(read):
            at = np.minimum(np.searchsorted(read, c.zones[2]), len(read) - 1)
            zones |= (read[at] >= c.zones[2]) & (read[at] <= c.zones[3])
        ranges.append(_row_runs(zones, c.count))
    return ranges, read


def _with_replay_anchors(launches: np.ndarray, grids: np.ndarray) -> np.ndarray:
    """`grids` and, for kernels inside conditional bodies among them, the grid ids of
    their replays' other kernels: a body's replays are split by those (the slow
    path's anchors), so they are read too."""
    body = (launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    in_body = body & np.isin(launches["grid_id"], grids)
    if not in_body.any():
        return grids
    replays = np.unique(launches["graph_launch_id"][in_body])
    same_replays = np.isin(launches["graph_launch_id"], replays) & ~body
    return np.union1d(grids, launches["grid_id"][same_replays])


def _row_runs(zones: np.ndarray, count: int) -> list:
    """The (first, end) event rows of each run of zones marked True."""
    edges = np.flatnonzero(np.diff(np.r_[0, zones.astype(np.int8), 0]))
    size = windows.ZONE_ROWS
    return [(int(a) * size, min(int(b) * size, count)) for a, b in zip(edges[::2], edges[1::2])]


def _resolve_deferred(rec, key, parts, take) -> None:
    """The slow path (graph replays sharing a grid id, launches listed a window late)
    over every event of the window that needs it, as launch_index_of_events runs it."""
    ev = np.concatenate([p[2] for p in parts])
    sub = dataclasses.replace(rec, event_chunks=[ev], event_chunk_devices=[key[0]], event_chunk_flushes=[key[1]])
    idx = analysis.launch_index_of_events(sub)
    at = 0
    for i, rows, part in parts:
        take(i, rows, part, idx[at : at + len(part)])
        at += len(part)


def check_overlap(wr: WindowedRecording, device: int, blocks: np.ndarray, bound=None) -> None:
    """The reader's blocks-open-at-once check (recording_checks.deepest_block_overlap)
    over a batch of whole SMs, with load()'s message; none where `bound` (the
    selection's OverlapBound) finds no SM of the device crowded."""
    if bound is not None and not bound.crowded(device):
        return
    depth, _, row = checks.deepest_block_overlap([blocks], [device])
    if depth > checks.MAX_BLOCK_OVERLAP:
        from ..errors import CorruptChunk

        b = blocks[row]
        bases = np.cumsum([0] + [c.count for c in wr.chunks])
        at = int(np.searchsorted(bases, int(b["order"]), side="right")) - 1
        chunk = wr.chunks[at]
        raise CorruptChunk(
            wr.rec.path,
            chunk.offset,
            f"EVENTS chunk: event {int(b['order']) - int(bases[at])}: {depth:,} blocks are open at once on SM "
            f"{int(b['sm_id'])} of "
            f"device {device} (at most {checks.MAX_BLOCK_OVERLAP:,}; an SM keeps at most 32 blocks resident)",
        )
