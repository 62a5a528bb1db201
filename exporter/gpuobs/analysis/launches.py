"""From a Recording to per-launch facts: which launch each event belongs to, and
per launch its span, blocks, SMs, exact counts and drops. The exporter, `stats`
and `record`'s summary all read these, so they agree."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..recording_file import schema
from ..recording_file.recording import UNFLUSHED, Recording
from . import block_ends as bounds

UNRESOLVED = -1


def _key(device, flush, grid) -> np.ndarray:
    k = np.zeros(len(grid), dtype=[("d", "<u4"), ("f", "<u4"), ("g", "<u8")])
    k["d"], k["f"], k["g"] = device, flush, grid
    return k


def _packed(*keys: np.ndarray) -> tuple:
    """The (device, flush, grid) keys of _key as one uint64 each, where every field fits
    beside the others: the same order, and numpy sorts and searches a uint64 about ten
    times faster than a structured row. Unchanged where they do not fit."""
    width = {f: max((int(k[f].max()).bit_length() for k in keys if len(k)), default=0) for f in "dfg"}
    if sum(width.values()) > 64:
        return keys
    shift_f, shift_d = np.uint64(width["g"]), np.uint64(width["g"] + width["f"])
    return tuple(
        (k["d"].astype(np.uint64) << shift_d) | (k["f"].astype(np.uint64) << shift_f) | k["g"].astype(np.uint64)
        for k in keys
    )


def of_launch(values: np.ndarray, launch_of_event: np.ndarray, missing) -> np.ndarray:
    """values[launch] for each event's launch (launch_index_of_events), `missing`
    where it has none; also when the recording lists no launch at all."""
    dtype = np.result_type(values, np.asarray(missing))
    resolved = launch_of_event >= 0
    if len(values) and resolved.all():  # the common case: one gather
        return values[launch_of_event].astype(dtype, copy=False)
    out = np.full(len(launch_of_event), missing, dtype=dtype)
    out[resolved] = values[launch_of_event[resolved]]
    return out


def launch_index_of_events(rec: Recording) -> np.ndarray:
    """Index into rec.launches for every event (UNRESOLVED where no launch matches).

    Events carry the device %gridid; the launch table carries the sanitizer's grid
    id for the same launch. Graph replays may reuse a grid id within one flush
    window: their events are split in time where every earlier block has ended
    (replays on one stream never overlap), and handed out in launch order; where
    fewer blocks are here than the replays launched (replays sampled out, blocks
    dropped), each replay's blocks stay together, told by a block seen again. A
    launch made while another thread's flush ran (flagged in its flags) is
    listed in the next window; its events are looked for there too."""
    ev = rec.events
    out = np.full(len(ev), UNRESOLVED, np.int64)
    if len(ev) == 0 or len(rec.launches) == 0:
        return out
    launches = rec.launches
    cand, single = single_launches(rec, ev["grid_id"], rec.event_devices, rec.event_flushes)
    out[single] = cand[single]
    rest = np.flatnonzero(~single)
    if len(rest) == 0:
        return out
    # Slow path for the rest: graph replays sharing a grid id, launches listed a window late.
    # A launch that raced a flush can have blocks in the window next to the one that
    # lists it: before it (files from tools that listed such a launch in the window
    # after the flush it raced), or after it (a cut that was not at a quiet point
    # lists the launch, and its blocks that ran past the cut fall in the next
    # window). It is a candidate in both, so that replays sharing its grid id there
    # are split among all of them.
    lf = rec.launch_flushes
    is_raced = ((launches["flags"] & schema.LaunchFlag.RACED_FLUSH) != 0) & (lf != UNFLUSHED)
    before = np.flatnonzero(is_raced & (lf > 0))
    after = np.flatnonzero(is_raced)
    lk = np.concatenate(
        [
            _key(launches["device_index"], lf, launches["grid_id"]),
            _key(launches["device_index"][before], lf[before] - 1, launches["grid_id"][before]),
            _key(launches["device_index"][after], lf[after] + 1, launches["grid_id"][after]),
        ]
    )
    index = np.concatenate([np.arange(len(launches)), before, after])
    sub = ev[rest]
    devices, flushes = rec.event_devices[rest], rec.event_flushes[rest]
    lk, in_window, next_window = _packed(
        lk, _key(devices, flushes, sub["grid_id"]), _key(devices, flushes + 1, sub["grid_id"])
    )
    by_key = np.argsort(lk, kind="stable")
    lk_sorted, order = lk[by_key], index[by_key]
    sub_out = np.full(len(rest), UNRESOLVED, np.int64)
    _match(sub, in_window, lk_sorted, order, sub_out, np.ones(len(rest), bool), launches)
    late = sub_out == UNRESOLVED
    if late.any():
        _match(sub, next_window, lk_sorted, order, sub_out, late, launches)
    out[rest] = sub_out
    return out


def grid_index(rec: Recording) -> tuple:
    """single_launches's index of the launch table: (launches by grid id, their grid ids,
    whether each is the only launch of its grid id). Made once where many parts of the
    events are resolved one after another."""
    launches = rec.launches
    by_grid = np.argsort(launches["grid_id"], kind="stable")
    grids = launches["grid_id"][by_grid]
    alone = np.ones(len(grids), bool)
    same_as_next = grids[1:] == grids[:-1]
    alone[1:] &= ~same_as_next
    alone[:-1] &= ~same_as_next
    return by_grid, grids, alone


def single_launches(rec: Recording, grid_ids, devices, flushes, index=None) -> tuple[np.ndarray, np.ndarray]:
    """The fast path of launch_index_of_events: (candidate launch, resolved) per event,
    resolved where its grid id names exactly one launch, on its device and window.
    Whether an event resolves here depends only on its (device, window, grid id), so
    a part of a window's events resolves as it would with all of them. `index`:
    grid_index(rec), where the caller keeps it."""
    launches = rec.launches
    by_grid, grids, alone = grid_index(rec) if index is None else index
    # a grid id held by exactly one launch, found with one binary search per event
    left = np.minimum(np.searchsorted(grids, grid_ids, side="left"), len(grids) - 1)
    single = (grids[left] == grid_ids) & alone[left]
    cand = by_grid[left]
    single &= launches["device_index"][cand] == devices
    single &= rec.launch_flushes[cand] == flushes
    return cand, single


def _grid_blocks(launches) -> np.ndarray:
    g = launches["grid"].astype(np.int64)
    return g[:, 0] * g[:, 1] * g[:, 2]


def _match(ev, ek, lk_sorted, order, out, wanted, launches) -> None:
    left = np.searchsorted(lk_sorted, ek, side="left")
    right = np.searchsorted(lk_sorted, ek, side="right")
    found = wanted & (right > left)
    unique = found & (right - left == 1)
    out[unique] = order[left[unique]]
    shared = np.flatnonzero(found & (right - left > 1))
    if len(shared) == 0:
        return
    groups = {}
    for i in shared:
        groups.setdefault((int(left[i]), int(right[i])), []).append(i)
    body = (launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    grid_blocks = _grid_blocks(launches)
    # Replays of kernels inside conditional bodies last after the others: theirs are
    # the anchors those are split by.
    later = []
    for (lo, hi), members in groups.items():
        candidates = np.sort(order[lo:hi])  # launch order
        if body[candidates].all():
            later.append((np.asarray(members), candidates))
        else:
            _split_replays(ev, np.asarray(members), candidates, out, grid_blocks)
    if later:
        anchors = _replay_anchors(ev, out, launches, body)
        for members, candidates in later:
            if not _split_by_anchors(ev, members, candidates, out, launches, anchors):
                _split_replays(ev, members, candidates, out, grid_blocks)


def _replay_anchors(ev, out, launches, body) -> dict:
    """Per graph replay (its launch id): the first and last block start of its
    resolved events outside conditional bodies, and the first and last listed of
    the launches they belong to."""
    mask = out >= 0
    mask[mask] = ~body[out[mask]]
    of = out[mask]
    replay = launches["graph_launch_id"][of].astype(np.int64)
    keep = replay != 0
    if not keep.any():
        return {}
    replay, of, start = replay[keep], of[keep], ev["time_start"][mask][keep].astype(np.int64)
    listed = launches["launch_id"][of].astype(np.int64)
    keys, inverse = np.unique(replay, return_inverse=True)

    def lowest_highest(values):
        low, high = np.full(len(keys), np.iinfo(np.int64).max), np.full(len(keys), np.iinfo(np.int64).min)
        np.minimum.at(low, inverse, values)
        np.maximum.at(high, inverse, values)
        return low, high

    (first, last), (listed_first, listed_last) = lowest_highest(start), lowest_highest(listed)
    return {
        int(k): (int(a), int(b), int(p), int(q)) for k, a, b, p, q in zip(keys, first, last, listed_first, listed_last)
    }


def _split_by_anchors(ev, members, candidates, out, launches, anchors) -> bool:
    """A kernel inside a conditional body runs as often as the device decides, and
    every run of every replay shares one grid id, so neither a grid's size nor the
    gaps between runs tell its replays apart (a run's ends may even be stamped by
    the next run's early exits). The replay's other kernels do: replays of one exec
    never overlap and starts are never late, so an event that starts at or after
    replay r's first anchor start is of replay r or later, and one that starts before
    replay r's last anchor start is of replay r or earlier. Events between the two
    (after replay r's anchors, before replay r+1's) go the way the graph lists its
    anchors: listed before the body, to r; after it, to r+1. False (the caller falls
    back to the gaps) when a replay has no anchor or the anchors are out of order."""
    found = [anchors.get(int(r)) for r in launches["graph_launch_id"][candidates]]
    if any(a is None for a in found):
        return False
    first = np.array([a[0] for a in found], np.int64)
    last = np.array([a[1] for a in found], np.int64)
    if np.any(np.diff(first) < 0) or np.any(np.diff(last) < 0):
        return False
    start = ev["time_start"][members].astype(np.int64)
    k = len(candidates)
    lo = np.clip(np.searchsorted(first, start, side="right") - 1, 0, k - 1)
    hi = np.clip(np.searchsorted(last, start, side="right"), 0, k - 1)
    if np.any(lo > hi):
        return False
    listed = launches["launch_id"][candidates].astype(np.int64)
    before = np.array([a[3] < n for a, n in zip(found, listed)])  # every anchor listed before the body
    after = np.array([a[2] > n for a, n in zip(found, listed)])
    pick = np.where(before[lo], lo, np.where(after[lo], hi, lo))
    mixed = ~before[lo] & ~after[lo] & (lo < hi)
    if mixed.any():  # anchors on both sides: the nearer one
        near_hi = (first[hi[mixed]] - start[mixed]) < (start[mixed] - last[lo[mixed]])
        pick[mixed] = np.where(near_hi, hi[mixed], lo[mixed])
    out[members] = candidates[pick]
    return True


def _spans(ev: np.ndarray):
    """Start, end and the over-stamped mask of events. An end stamped by a later
    replay's exits (flagged) would stretch its block into that replay, so such a
    block counts from its start alone."""
    starts = ev["time_start"]
    over = (ev["flags"] & schema.BLOCK_END_UNCONFIRMED).astype(bool) & (ev["kind"] == schema.EventKind.BLOCK)
    ends = np.where(over, starts, np.maximum(ev["time_end"], starts))
    return starts, ends, over


def _split_replays(ev, members, candidates, out, grid_blocks) -> None:
    """The events of one grid id shared by several launches (graph replays), split
    in time: at the gaps where every earlier block has ended, else by start order."""
    starts, ends, _ = _spans(ev[members])
    starts, ends = starts.astype(np.int64), ends.astype(np.int64)
    by_time = np.argsort(starts, kind="stable")
    s, e = starts[by_time], ends[by_time]
    running_end = np.maximum.accumulate(e)
    gaps = np.zeros(len(s), np.int64)
    gaps[1:] = s[1:] - running_end[:-1]
    cut_candidates = np.flatnonzero(gaps >= 0)
    cut_candidates = cut_candidates[cut_candidates > 0]
    k = len(candidates)
    sizes = grid_blocks[candidates]
    all_blocks = bool((ev["kind"][members] == schema.EventKind.BLOCK).all())
    if all_blocks and len(s) < int(sizes.sum()) and (sizes == sizes[0]).all():
        at = members[by_time]
        key = (ev["block_x"][at].astype(np.uint64) << np.uint64(32)) | (
            (ev["block_y"][at].astype(np.uint64) << np.uint64(16)) | ev["block_z"][at].astype(np.uint64)
        )
        groups = _replays_with_blocks_missing(key, s, gaps, int(sizes[0]), k)
        if groups is not None:
            group_of = np.searchsorted(groups, np.arange(len(s)), side="right")
            out[at] = candidates[group_of]
            return
    if len(cut_candidates) < k - 1:
        # Too few clean cuts: some end was stamped late without a flag (a later
        # replay's early exits filled in exactly as many threads as the block's
        # own early exits left out). Starts are never late: cut at the largest
        # gaps between consecutive starts.
        gaps = np.zeros(len(s), np.int64)
        gaps[1:] = s[1:] - s[:-1]
        cut_candidates = np.arange(1, len(s))
    cuts = np.sort(cut_candidates[np.argsort(-gaps[cut_candidates], kind="stable")[: k - 1]])
    if all_blocks and len(s) == int(sizes.sum()) and not np.array_equal(np.diff(cuts, prepend=0, append=len(s)), sizes):
        # Every block of every replay is here, yet the time cuts give some replay
        # more or fewer blocks than its grid: ends stamped late by a later replay
        # (early exits) hid the real gaps. Replays of one exec never overlap and
        # starts are never late, so the blocks split in start order by grid size.
        cuts = np.cumsum(sizes)[:-1]
    group_of = np.searchsorted(cuts, np.arange(len(s)), side="right")
    out[members[by_time]] = candidates[np.minimum(group_of, k - 1)]


# A clean gap (every earlier block ended) this much longer than the node's typical
# gap between block starts, and at least this long, parts two replays whose blocks
# do not repeat: the end of one on-stretch of a sampled run and the start of the next.
_STRETCH_GAP_FACTOR = 20
_STRETCH_GAP_MIN_NS = 50_000


def _replays_with_blocks_missing(key, starts, clean_gaps, grid_blocks: int, replays: int):
    """Where the replays of one graph node begin among their events in start order
    (the first event of each replay after the first), when fewer blocks are here
    than the listed replays launched: some replays sampled out whole (the sample
    gate, a duty cycle), or blocks dropped. Replays of one exec never overlap and
    starts are never late, so a block seen again begins a new replay; two partial
    replays whose blocks do not repeat (a gate that closed in one and opened in a
    later one) are parted by the long clean gap of the time between. None where no
    block identity can be read (more events than a grid has blocks per replay), or
    where more replays begin than the `replays` listed.
    `key`: each event's block (x, y, z) as one number, in start order."""
    n = len(starts)
    # The previous event with the same block, in start order (-1: none).
    by_key = np.argsort(key, kind="stable")
    prev_same = np.full(n, -1, np.int64)
    same = key[by_key][1:] == key[by_key][:-1]
    prev_same[by_key[1:][same]] = by_key[:-1][same]
    cuts = _cuts_at_repeats(prev_same, starts, clean_gaps, grid_blocks, at_largest_gap=True)
    if cuts is not None and len(cuts) > replays - 1:
        # A long pause inside a replay (the program or the tool held it up) drew a
        # cut before the block seen again, which then needed one more: the fewest
        # replays the blocks allow begin at the blocks seen again.
        cuts = _cuts_at_repeats(prev_same, starts, clean_gaps, grid_blocks, at_largest_gap=False)
    if cuts is None or len(cuts) > replays - 1:
        return None  # more replays begin than are listed here (a launch listed in another window)
    start_gaps = np.diff(starts)
    typical = float(np.median(start_gaps[start_gaps > 0])) if (start_gaps > 0).any() else 0.0
    threshold = max(_STRETCH_GAP_MIN_NS, _STRETCH_GAP_FACTOR * typical)
    stretches = np.flatnonzero(clean_gaps >= threshold)
    stretches = np.setdiff1d(stretches[stretches > 0], cuts)
    # Such a gap may as well be a replay's own pause: they part replays only while
    # fewer are found than listed, the longest first.
    room = replays - 1 - len(cuts)
    if len(stretches) > room:
        stretches = stretches[np.argsort(-clean_gaps[stretches], kind="stable")[:room]]
    return np.union1d(cuts, stretches).astype(np.int64)


def _cuts_at_repeats(prev_same, starts, clean_gaps, grid_blocks: int, at_largest_gap: bool):
    """Replays' first events, walking in start order: each replay ends before its
    first block seen again. The next one began after that block's earlier run and
    at or before it (a partial replay's other blocks may have started first):
    at_largest_gap, where the gap after every earlier block's end is largest, or,
    where ends stamped late by the next replay's exits hide every such gap, where
    the gap between starts is; else at the block seen again (the fewest replays).
    None where more distinct blocks come in a row than a grid has."""
    n = len(starts)
    cuts = []
    begin = 0
    while begin < n:
        # A replay has at most grid_blocks events: its end is within that many.
        window = prev_same[begin + 1 : begin + 1 + grid_blocks]
        repeat = np.flatnonzero(window >= begin)
        if len(repeat):
            seen_again = begin + 1 + int(repeat[0])
            end = seen_again
            if at_largest_gap:
                lo = int(prev_same[seen_again]) + 1
                gaps = clean_gaps[lo : seen_again + 1]
                if gaps.max() < 0:
                    gaps = starts[lo : seen_again + 1] - starts[lo - 1 : seen_again]
                end = lo + int(np.argmax(gaps))
            cuts.append(end)
        elif begin + 1 + grid_blocks >= n:
            end = n  # the last replay here
        else:
            return None
        begin = end
    return np.asarray(cuts, np.int64)


@dataclass
class LaunchTable:
    """One row per launch, aligned with rec.launches."""

    name: list
    first_start: np.ndarray  # device ns of the first block start (0 if none recorded)
    last_end: np.ndarray  # device ns of the last block end
    blocks_recorded: np.ndarray
    events_kept: np.ndarray  # memory events kept
    counted: np.ndarray  # exact blocks/accesses counted on the device (-1: unknown)
    counted_shared: np.ndarray  # launches sharing that count (1 = exact for this launch)
    sms_touched: np.ndarray
    grid_blocks: np.ndarray
    ends_unconfirmed: np.ndarray = None  # blocks whose end a later replay may have stamped (flagged)
    count_slot: np.ndarray = None  # the counter slot of each launch's count (see count_slots; -1: none)
    # block_starts (None otherwise): every block's end bound, and per launch what bounds last_end
    block_ends: bounds.BlockEnds | None = None
    end_bound: np.ndarray | None = None  # uint8 EndBound per launch
    end_weak: np.ndarray | None = None  # bool per launch: last_end is a weak bound (may include host time)


def launch_table(rec: Recording, launch_of_event: np.ndarray | None = None) -> LaunchTable:
    launches = rec.launches
    n = len(launches)
    if launch_of_event is None:
        launch_of_event = launch_index_of_events(rec)
    ev = rec.events
    ok = launch_of_event >= 0
    every = bool(ok.all())  # the common case: no copy of the events (64 bytes each) for the mask
    idx = launch_of_event if every else launch_of_event[ok]
    resolved_ev = ev if every else ev[ok]
    kind = resolved_ev["kind"]
    is_block = kind == schema.EventKind.BLOCK
    first_start = np.full(n, np.iinfo(np.uint64).max, np.uint64)
    last_end = np.zeros(n, np.uint64)
    starts, ends, over = _spans(resolved_ev)
    ends_unconfirmed = np.bincount(idx[over], minlength=n)[:n]
    np.minimum.at(first_start, idx, starts)
    np.maximum.at(last_end, idx, ends)
    first_start[first_start == np.iinfo(np.uint64).max] = 0
    block_ends = end_bound = end_weak = None
    if bounds.is_block_starts(rec):  # no end recorded: the latest upper bound of its blocks' ends
        block_ends = bounds.block_end_bounds(rec, launch_of_event)
        bounded_end, end_bound, end_weak = bounds.launch_end_quality(block_ends, n, with_weak=True)
        last_end = np.maximum(last_end, bounded_end)
    blocks_recorded = np.bincount(idx[is_block], minlength=n)[:n]
    events_kept = np.bincount(idx[~is_block], minlength=n)[:n]
    sms = resolved_ev["sm_id"].astype(np.int64)
    del resolved_ev
    if len(sms) and n * (int(sms.max()) + 1) <= 50_000_000:
        seen = np.zeros((n, int(sms.max()) + 1), bool)
        seen[idx, sms] = True
        sms_touched = seen.sum(axis=1)
    else:
        sm_pairs = np.unique(idx.astype(np.int64) * 65536 + sms)
        sms_touched = np.bincount(sm_pairs // 65536, minlength=n)[:n]
    counted = np.full(n, -1, np.int64)
    counted_shared = np.zeros(n, np.int64)
    count_slot = np.full(n, -1, np.int64)
    if len(rec.launch_counts) and n:
        ck = _key(rec.launch_counts["device_index"], rec.launch_counts["flush_seq"], rec.launch_counts["grid_id"])
        lk = _key(launches["device_index"], rec.launch_flushes, launches["grid_id"])
        order = np.argsort(ck)
        pos = np.searchsorted(ck[order], lk)
        pos = np.minimum(pos, len(ck) - 1)
        hit = ck[order][pos] == lk
        counted[hit] = rec.launch_counts["count"][order][pos][hit].astype(np.int64)
        counted_shared[hit] = rec.launch_counts["launches_sharing"][order][pos][hit]
        count_slot[hit] = count_slots(rec)[order][pos][hit]
    names = rec.launch_names(launches)
    grid_blocks = (launches["grid"].astype(np.int64)).prod(axis=1) if n else np.zeros(0, np.int64)
    return LaunchTable(
        names,
        first_start,
        last_end,
        blocks_recorded,
        events_kept,
        counted,
        counted_shared,
        sms_touched,
        grid_blocks,
        ends_unconfirmed,
        count_slot,
        block_ends,
        end_bound,
        end_weak,
    )


def count_slots(rec: Recording) -> np.ndarray:
    """For each row of rec.launch_counts, its counter slot in its flush window, as an
    index 0..k-1: launches that shared a slot carry the slot's one total each."""
    c = rec.launch_counts
    if len(c) == 0:
        return np.zeros(0, np.int64)
    slot = c["grid_id"] & np.uint64(schema.launch_table_size(rec.schema_hash) - 1)
    (key,) = _packed(_key(c["device_index"], c["flush_seq"], slot))  # the same order, sorted ~10x faster
    _, slot_of_row = np.unique(key, return_inverse=True)
    return slot_of_row.astype(np.int64).ravel()


def slot_counts(rec: Recording) -> np.ndarray:
    """The total of each counter slot of count_slots (the count of any of its rows)."""
    slots = count_slots(rec)
    totals = np.zeros(int(slots.max()) + 1 if len(slots) else 0, np.int64)
    totals[slots] = rec.launch_counts["count"].astype(np.int64)
    return totals


def counted_total(rec: Recording, table: LaunchTable | None = None, launches: np.ndarray | None = None) -> int:
    """Exact blocks or accesses the device counted, every counter slot once: of the
    whole recording, or of the given launch indices (with their launch_table)."""
    totals = slot_counts(rec)
    if launches is None:
        return sum(totals.tolist())  # Python ints: counts below 2^63 each may sum past it
    slots = np.unique(table.count_slot[launches])
    return sum(totals[slots[slots >= 0]].tolist())


def counted_by_flush(rec: Recording) -> dict:
    """Exact blocks or accesses the device counted in each flush window, every counter
    slot once (launches that shared a slot carry its one total each): (device_index,
    flush_seq) -> count, for checks that set a window's records against its counts."""
    c = rec.launch_counts
    if len(c) == 0:
        return {}
    slots = count_slots(rec)
    _, first_row = np.unique(slots, return_index=True)
    out: dict = {}
    for dev, seq, count in zip(
        c["device_index"][first_row].tolist(), c["flush_seq"][first_row].tolist(), c["count"][first_row].tolist()
    ):
        out[(dev, seq)] = out.get((dev, seq), 0) + count
    return out


def _modules_with(rec: Recording, status) -> int:
    return int((rec.modules["status"] == status).sum()) if len(rec.modules) else 0


def event_counts(rec: Recording) -> dict:
    """summary's figures that read events: block records, memory samples, and events of
    no listed launch (streamed_facts.gather gives the same of a windowed recording)."""
    ev = rec.events
    return {
        "block_events": int((ev["kind"] == schema.EventKind.BLOCK).sum()),
        "memory_events": int((ev["kind"] == schema.EventKind.MEMORY).sum()),
        # Records whose grid id matches no launch of their window (or the next),
        # and counts in counter slots no launch owned: never silently dropped.
        "events_unattributed": int((launch_index_of_events(rec) < 0).sum()) if len(ev) else 0,
    }


def summary(rec: Recording, counts: dict | None = None) -> dict:
    """The numbers `gpuobs record` prints after a run; `counts`: event_counts(rec), where
    the caller has them."""
    t = rec.totals
    mode = rec.run.mode_name if rec.run else "unknown"
    counts = event_counts(rec) if counts is None else counts
    flags = rec.launches["flags"]
    return {
        "mode": mode,
        "launches": int(len(rec.launches)),
        "device_launches": int(((flags & schema.LaunchFlag.FROM_DEVICE) != 0).sum()),
        "conditional_body_launches": int(((flags & schema.LaunchFlag.CONDITIONAL_BODY) != 0).sum()),
        "functions": len(rec.functions),
        "modules_patched": _modules_with(rec, schema.ModuleStatus.PATCHED),
        "modules_failed": _modules_with(rec, schema.ModuleStatus.PATCH_FAILED),
        "block_events": counts["block_events"],
        "memory_events": counts["memory_events"],
        "counted": counted_total(rec),
        "attempted": t["attempted"],
        "recorded": t["recorded"],
        "dropped": t["dropped"],
        "filtered": t["filtered"],
        "incomplete": t["incomplete"],
        "unconfirmed_ends": t["unconfirmed_ends"],
        "unmatched_exit_threads": t["unmatched_exit_threads"],
        "unrecorded_launches": t["unrecorded_launches"],
        "events_unattributed": counts["events_unattributed"],
        "counts_unattributed": int(rec.flushes["unattributed"].sum()) if len(rec.flushes) else 0,
        "modules_deferred": _modules_with(rec, schema.ModuleStatus.DEFERRED),
        "notices": rec.notices.texts(),
        "flushes": int(len(rec.flushes)),
        "complete": rec.complete,
    }


def _group_sums(group: np.ndarray, values: np.ndarray, n_groups: int) -> list:
    """Per group, the exact sum of its values (Python ints): in int64 where no sum can
    reach 2^63 (checked in float), else one Python pass."""
    values = values.astype(np.int64)
    magnitude = np.zeros(n_groups, np.float64)
    np.add.at(magnitude, group, np.abs(values.astype(np.float64)))
    if not len(values) or magnitude.max() < 2.0**62:
        out = np.zeros(n_groups, np.int64)
        np.add.at(out, group, values)
        return out.tolist()
    exact = [0] * n_groups
    for g, v in zip(group.tolist(), values.tolist()):
        exact[g] += v
    return exact


PERCENTILES = (50, 90, 99)  # of block durations, per kernel


def percentile_ranks(count: np.ndarray, ps: tuple) -> dict:
    """{p: (groups with values, rank below, rank above, gamma)}: where numpy's linear
    method (its virtual index, step by step) reads each group's sorted values."""
    has = count > 0
    plan = {}
    for p in ps:
        q = p / 100
        n = count[has].astype(np.float64)
        virtual = n * q + (1 + q * (1 - 1 - 1)) - 1
        below = np.floor(virtual)
        gamma = virtual - below
        last = count[has] - 1
        prev = np.minimum(below.astype(np.int64), last)
        nxt = np.minimum(prev + 1, last)
        prev[virtual >= last] = last[virtual >= last]
        plan[p] = (has, prev, nxt, gamma)
    return plan


def percentiles_at(plan: dict, n_groups: int, value_at) -> dict:
    """{p: [percentile or None, per group]} of a percentile_ranks plan; value_at(groups,
    ranks) gives the value at each rank of each group's sorted values."""
    out = {}
    for p, (has, prev, nxt, gamma) in plan.items():
        groups = np.flatnonzero(has)
        a, b = value_at(groups, prev), value_at(groups, nxt)
        diff = b - a
        lerp = a + diff * gamma
        lerp = np.where(gamma >= 0.5, b - diff * (1 - gamma), lerp)
        column = np.full(n_groups, None, object)
        column[has] = lerp.astype(np.int64).tolist()  # int(): toward zero, as before
        out[p] = column.tolist()
    return out


def _grouped_percentiles(group: np.ndarray, values: np.ndarray, n_groups: int, ps: tuple) -> dict:
    """{p: [int(np.percentile(values of group g, p)) or None, per g]}, by one sort of all values."""
    order = np.lexsort((values, group))
    group, values = group[order], values[order]
    count = np.bincount(group, minlength=n_groups)
    begin = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    return percentiles_at(percentile_ranks(count, ps), n_groups, lambda g, rank: values[begin[g] + rank])


def kernel_groups(rec: Recording, names: list) -> tuple[dict, np.ndarray]:
    """({(device, name): kernel index}, in the order of first launch; the kernel of each launch)."""
    groups: dict = {}
    kernel_of_launch = np.array(
        [groups.setdefault(key, len(groups)) for key in zip(rec.launches["device_index"].tolist(), names)],
        np.int64,
    )
    return groups, kernel_of_launch


@dataclass
class KernelEventFigures:
    """kernel_stats's per-kernel figures that read events (the rest are per launch)."""

    memory_events: np.ndarray
    sms: np.ndarray  # SMs its records came from
    percentiles: dict  # p -> [block duration ns or None, per kernel]


def timed_blocks(rec: Recording) -> bool:
    """Whether block durations are measured (block_starts bounds ends, measures none)."""
    return not bounds.is_block_starts(rec)


def block_durations(ev: np.ndarray) -> np.ndarray:
    return ev["time_end"].astype(np.int64) - ev["time_start"].astype(np.int64)


def kernel_event_figures(rec: Recording, of: np.ndarray, kernel_of_launch: np.ndarray, n_kernels: int):
    ev = rec.events
    resolved = of >= 0
    ev_kernel = np.full(len(ev), -1, np.int64)
    ev_kernel[resolved] = kernel_of_launch[of[resolved]]
    is_block = ev["kind"] == schema.EventKind.BLOCK
    memory_events = np.bincount(ev_kernel[resolved & ~is_block], minlength=n_kernels)
    sm_pairs = np.sort((ev_kernel[resolved] << 32) | ev["sm_id"][resolved].astype(np.int64))
    sm_pairs = sm_pairs[np.r_[True, sm_pairs[1:] != sm_pairs[:-1]]] if len(sm_pairs) else sm_pairs
    sms = np.bincount(sm_pairs >> 32, minlength=n_kernels)
    timed = resolved & is_block if timed_blocks(rec) else np.zeros(len(ev), bool)
    percentiles = _grouped_percentiles(ev_kernel[timed], block_durations(ev[timed]), n_kernels, PERCENTILES)
    return KernelEventFigures(memory_events, sms, percentiles)


def kernel_stats(
    rec: Recording,
    of: np.ndarray | None = None,
    table: LaunchTable | None = None,
    figures: KernelEventFigures | None = None,
) -> list[dict]:
    """Per kernel (by name and device): launches, blocks, SMs, block-duration
    percentiles (ns), exact counts, memory events kept, blocks dropped. `of` and
    `table`: launch_index_of_events and launch_table of rec, where the caller has them;
    `figures`: the per-event figures, where a pass over the events gave them
    (streamed_facts.py), so that no event is read here."""
    if figures is None:
        of = launch_index_of_events(rec) if of is None else of
    table = launch_table(rec, of) if table is None else table
    launches = rec.launches
    groups, kernel_of_launch = kernel_groups(rec, table.name)
    n_kernels = len(groups)
    if figures is None:
        figures = kernel_event_figures(rec, of, kernel_of_launch, n_kernels)
    # A counter slot shared by launches (graph replays of one node, grid ids that
    # collide) belongs to a kernel when all its launches are that kernel's; else to
    # none, and counted_total still counts it once.
    totals = slot_counts(rec)
    slot_kernel = np.full(len(totals), -1, np.int64)
    has_slot = table.count_slot >= 0
    if has_slot.any():
        pairs = np.unique(np.stack([table.count_slot[has_slot], kernel_of_launch[has_slot]]), axis=1)
        slots_seen, first, kernels_of_slot = np.unique(pairs[0], return_index=True, return_counts=True)
        one = kernels_of_slot == 1
        slot_kernel[slots_seen[one]] = pairs[1][first[one]]
    # launches whose counter slot other kernels' launches share: in no kernel's "counted"
    shared = np.zeros(len(launches), np.int64)
    shared[has_slot] = slot_kernel[table.count_slot[has_slot]] != kernel_of_launch[has_slot]
    # Every per-kernel figure is a grouped sum over launches or events: one pass each.
    recorded = table.blocks_recorded.astype(np.int64)
    grid = table.grid_blocks.astype(np.int64)
    per_launch = {
        "launches": np.ones(len(launches), np.int64),
        "blocks": grid,
        "blocks_recorded": recorded,
        "counted_shared_launches": shared,
        "blocks_dropped": np.where(recorded > 0, np.maximum(grid - recorded, 0), 0),
        # block ends stamped by a later replay of the same graph node (see the schema's block flags)
        "ends_unconfirmed": table.ends_unconfirmed.astype(np.int64),
    }
    sums = {column: _group_sums(kernel_of_launch, values, n_kernels) for column, values in per_launch.items()}
    owned = slot_kernel >= 0
    counted = _group_sums(slot_kernel[owned], totals[owned], n_kernels)
    rows = []
    for k, (device, name) in enumerate(groups):
        row = {
            "device": device,
            "kernel": name,
            "launches": int(sums["launches"][k]),
            "blocks": int(sums["blocks"][k]),
            "blocks_recorded": int(sums["blocks_recorded"][k]),
            "sms": int(figures.sms[k]),
            "counted": int(counted[k]),
            "counted_shared_launches": int(sums["counted_shared_launches"][k]),
            "memory_events": int(figures.memory_events[k]),
            "blocks_dropped": int(sums["blocks_dropped"][k]),
            "ends_unconfirmed": int(sums["ends_unconfirmed"][k]),
        }
        for p, values in figures.percentiles.items():
            row[f"block_ns_p{p}"] = values[k]
        rows.append(row)
    rows.sort(key=lambda r: -(r["blocks_recorded"] or r["counted"]))
    return rows


def conditional_runs(rec: Recording, table: LaunchTable) -> np.ndarray:
    """Per launch, how many times a kernel inside a conditional node's body (flag
    CONDITIONAL_BODY: listed once per graph replay for all its runs) ran in that replay:
    its exact count over its grid's blocks, in block modes; 1 for any other launch;
    -1 where that does not divide (or was not counted exactly: shared, memory modes)."""
    runs = np.ones(len(rec.launches), np.int64)
    body = (rec.launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    if not body.any():
        return runs
    mode = rec.run.mode_name if rec.run else ""
    grid = np.maximum(table.grid_blocks, 1)
    ok = body & (table.counted >= 0) & (table.counted_shared == 1) & (table.counted % grid == 0)
    ok &= not schema.mode_has(mode, schema.Trait.MEMORY_PATCH)
    runs[body] = -1
    runs[ok] = table.counted[ok] // grid[ok]
    return runs
