"""Block ends in block_starts recordings, where no exit is recorded: per block an
upper bound of its end, the tightest of three, and which one it is.

* slot (EndBound.SLOT): the hardware warp slots (%warpid) a block's warps took on
  its SM (the event's `address` mask). A slot is free before the next block to
  take it starts its first warp (measured on an H200: 0 violations over 3.6M
  warps), so the block ended before the latest of the next starts in its slots.
  Next occupants come from every block of the device, in any launch or flush
  window: a kernel's last wave is bounded by the next kernel's arrivals. Only for
  blocks whose every warp's slot is known (no GPUOBS_BLOCK_SLOTS_INCOMPLETE) and
  whose every slot is taken again later.
* stream (EndBound.STREAM): a kernel starts after the kernel before it on its
  stream has ended, so the earliest block start of the next launch on the same
  stream (same device and stream id, a later launch id, with blocks recorded;
  launches between them without recorded blocks are passed over) bounds every
  block of a launch. Only between plain host launches (none of GRAPH_NODE,
  FROM_NODE_TABLE, FROM_DEVICE: graph nodes follow the graph's edges, a device
  launch names no host stream). Programmatic dependent launch breaks this: a
  kernel launched with it may start before the one before it ends. So would a
  stream handle reused after its stream was destroyed with work still running,
  or two threads launching into one stream in another order than their launch
  ids. A next kernel that starts before this one's last block started shows the
  order did not hold, and bounds nothing; an overlap after that is not seen.
* quiet (EndBound.QUIET): the %globaltimer the tool read at a quiet flush, after
  every stream with launches in the window was synchronised
  (gpuobs_slots_info.device_quiet_ns, nonzero): every block of a launch listed in
  that window (the launch's flush, on its device) ended before it. A launch that
  raced the flush is listed in the next window, so its blocks get that window's.
* none (EndBound.NONE): no bound; end_bound_ns is the block's start (drawn as a
  zero-length slice).

A candidate below the block's own start is never used (a start is a lower bound
of the end). Everything is sorts and scatters over all blocks at once.

Weak bounds (BlockEnds.weak). A bound is tight only when what made it was already
waiting on the device for this block to end. It is weak, and says nothing about
the kernel's duration, when it may include time the device spent waiting for the
host: a wait the tool made the launching thread take (PROGRAM_WAITED), a flush,
a host stall, an idle device. Per block:

* slot and stream bounds: weak when the launch of the block that made the bound
  was enqueued by the host (its host_begin_ns on the device clock, from the clock
  samples, to within half their widest bracket) not surely before this block
  started. Without clock samples for its device: when it was enqueued in a later
  flush window than this block's launch (a flush, and whatever the host did around
  it, lies between; a launch that raced a flush was enqueued in the window before
  the one that lists it). A later block of the same launch, or of the same graph
  replay, was enqueued with it: never weak.
* quiet bounds: always weak. The quiet point is read after the host's
  synchronisation returns; the recording does not say when that synchronisation
  began, so the device may have been idle for any time before it.
* none: no bound (not weak: there is nothing to include).
* any bound past the end of the on time its block started in, under a duty cycle
  kept on the device's clock: weak. Nothing starts in the off time, so such a
  bound was made by a start in a later on time and includes the off time."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..recording_file import schema
from ..recording_file.recording import Recording
from ..recording_file.recording_checks import SM_ID_LIMIT
from . import sampling

SLOTS_INCOMPLETE = schema.constant("GPUOBS_BLOCK_SLOTS_INCOMPLETE")
SLOTS_PER_SM = 64  # bits of the event's slot mask
NOT_PLAIN = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE | schema.LaunchFlag.FROM_DEVICE
NO_BOUND = np.iinfo(np.uint64).max


class EndBound(enum.IntEnum):
    """What bounds a block's end; on a tie the lower value is named."""

    NONE = 0
    SLOT = 1
    STREAM = 2
    QUIET = 3


LABELS = {EndBound.NONE: "none", EndBound.SLOT: "slot", EndBound.STREAM: "stream", EndBound.QUIET: "quiet"}


@dataclass
class BlockEnds:
    """One row per block event of the recording, in rec.events order."""

    rows: np.ndarray  # int64: the block event's row in rec.events
    end_bound_ns: np.ndarray  # uint64 device ns: an upper bound of the end; the start where quality is NONE
    quality: np.ndarray  # uint8 EndBound
    slots_known: np.ndarray  # uint8: slots in the block's mask
    launch: np.ndarray  # int64: index into rec.launches, -1 unresolved
    weak: np.ndarray = None  # bool: the bound may include host time (module doc); False where quality is NONE

    def at(self, event_rows: np.ndarray) -> np.ndarray:
        """Positions in these arrays of block events given by their rows in rec.events."""
        return np.searchsorted(self.rows, event_rows)


def is_block_starts(rec: Recording) -> bool:
    return rec.run is not None and schema.mode_has(rec.run.mode, schema.Trait.BOUNDED_ENDS)


def block_end_bounds(rec: Recording, launch_of_event: np.ndarray | None = None) -> BlockEnds:
    """The bound of every block event's end (module doc). `launch_of_event`: as
    launches.launch_index_of_events returns it (computed when not given)."""
    if launch_of_event is None:
        from .launches import launch_index_of_events  # launches.launch_table calls this module

        launch_of_event = launch_index_of_events(rec)
    ev = rec.events
    rows = np.flatnonzero(ev["kind"] == schema.EventKind.BLOCK)
    every = len(rows) == len(ev)  # the common case: columns need no gather

    def col(name):
        return ev[name] if every else ev[name][rows]

    start = col("time_start").astype(np.uint64)
    launch = launch_of_event[rows].astype(np.int64)
    group = rec.event_devices[rows].astype(np.int64) * SM_ID_LIMIT + col("sm_id")  # (device, SM)
    warps = (col("thread_index").astype(np.int64) + 31) // 32
    by_slot, known, slot_maker = slot_bounds(col("address"), start, group, warps, col("flags"))
    by_stream, stream_maker = stream_bounds(rec, launch, start, with_makers=True)
    weak_if = host_made(rec, launch, start)
    candidates = (
        (EndBound.SLOT, by_slot, weak_if(np.where(slot_maker >= 0, launch[np.maximum(slot_maker, 0)], -1))),
        (EndBound.STREAM, by_stream, weak_if(stream_maker)),
        (EndBound.QUIET, quiet_bounds(rec, launch), np.ones(len(rows), bool)),
    )
    end = np.full(len(rows), NO_BOUND, np.uint64)
    quality = np.zeros(len(rows), np.uint8)
    weak = np.zeros(len(rows), bool)
    for kind, bound, is_weak in candidates:  # in EndBound order: a strictly tighter one replaces
        tighter = (bound >= start) & (bound < end)
        end[tighter] = bound[tighter]
        quality[tighter] = kind
        weak[tighter] = is_weak[tighter]
    end[quality == EndBound.NONE] = start[quality == EndBound.NONE]
    duty = sampling.device_duty(rec)
    if duty is not None:
        on, period = (np.uint64(x) for x in duty)
        weak |= (quality != EndBound.NONE) & (end >= start - start % period + on)
    return BlockEnds(rows, end, quality, known.astype(np.uint8), launch, weak)


UNKNOWN = np.iinfo(np.int64).max


def host_offsets(rec: Recording) -> dict:
    """Per device: (device clock - host CLOCK_MONOTONIC in integer ns, the median over its
    clock samples; the largest half bracket); devices without usable samples are absent."""
    s = rec.clock_samples
    if len(s) == 0:
        return {}
    s = s[(s["method"] == 1) & (s["device_ns"] > 0)]
    out = {}
    for device in np.unique(s["device_index"]).tolist():
        mine = s[s["device_index"] == device]
        before, after = mine["monotonic_before"].astype(np.int64), mine["monotonic_after"].astype(np.int64)
        offset = mine["device_ns"].astype(np.int64) - before - (after - before) // 2  # integers: exact
        offset = np.sort(offset)
        middle = (int(offset[(len(offset) - 1) // 2]) + int(offset[len(offset) // 2])) // 2  # a median, in integers
        out[device] = (middle, float((after - before).max()) / 2)
    return out


def host_made(rec: Recording, launch: np.ndarray, start: np.ndarray):
    """A function of the launch that made each block's bound (-1: none) giving, per
    block, whether that bound is weak (module doc): its maker was not surely enqueued
    before the block started, or was listed in a later flush window."""
    launches = rec.launches
    n = len(launches)
    # device ns by which the launch was surely enqueued; UNKNOWN: no clock relation. In integers: a
    # %globaltimer value near 2^61 has a float64 step of 256 ns.
    enqueued = np.full(n, UNKNOWN, np.int64)
    for device, (offset, half) in host_offsets(rec).items():
        mine = launches["device_index"] == device
        enqueued[mine] = launches["host_begin_ns"][mine].astype(np.int64) + offset + int(np.ceil(half))
    flushes = rec.launch_flushes.astype(np.int64) if len(rec.launch_flushes) == n else np.zeros(n, np.int64)
    # the window a launch was enqueued in: one that raced a flush is listed in the next one
    raced = (launches["flags"] & schema.LaunchFlag.RACED_FLUSH) != 0
    enqueued_window = flushes - raced
    replay = launches["graph_launch_id"].astype(np.int64)

    def weak(maker: np.ndarray) -> np.ndarray:
        out = np.zeros(len(maker), bool)
        has = (maker >= 0) & (launch >= 0)
        m, own = maker[has], launch[has]
        together = (m == own) | ((replay[m] != 0) & (replay[m] == replay[own]))
        clock = enqueued[m] != UNKNOWN
        late = np.where(clock, ~(enqueued[m] < start[has].astype(np.int64)), enqueued_window[m] > flushes[own])
        out[has] = late & ~together
        return out

    return weak


def held_slots(masks: np.ndarray) -> list:
    """The set bits of uint64 masks as layers (rows, slots): layer k holds the k-th
    lowest slot of every mask with more than k, so a row appears once per layer.
    Peeling the lowest bit costs one pass per layer, not one per possible slot."""
    rows = np.flatnonzero(masks)
    left = np.asarray(masks, np.uint64)[rows]
    layers = []
    while len(rows):
        lowest = left & (~left + np.uint64(1))
        layers.append((rows, np.log2(lowest.astype(np.float64)).astype(np.int64)))  # exact for powers of two
        left = left ^ lowest
        more = left != 0
        rows, left = rows[more], left[more]
    return layers


def slot_bounds(mask, start, sm_group, warps, flags) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block (its slot mask, start, (device, SM) group, warps and flags): (the
    latest, over its slots, of the next later start in that slot of its SM, or
    NO_BOUND where a slot has none or its slots are incomplete; the number of slots
    it holds; the block whose start that latest is, -1 where none)."""
    n = len(mask)
    layers = held_slots(mask)
    known = np.zeros(n, np.int64)
    bound = np.zeros(n, np.uint64)
    maker = np.full(n, -1, np.int64)
    if layers:
        holder = np.concatenate([rows for rows, _ in layers])
        slot = np.concatenate([slots for _, slots in layers])
        successor, next_row = next_later_start(sm_group[holder] * SLOTS_PER_SM + slot, start[holder], True)
        next_block = np.where(next_row >= 0, holder[np.maximum(next_row, 0)], -1)
        at = 0
        for rows, _ in layers:  # NO_BOUND (the largest value) spoils a block's max
            mine = slice(at, at + len(rows))
            later = successor[mine] > bound[rows]
            maker[rows[later]] = next_block[mine][later]
            bound[rows[later]] = successor[mine][later]
            known[rows] += 1
            at += len(rows)
    # Every warp's slot known: the tool's flag, and the count itself.
    incomplete = ((flags & SLOTS_INCOMPLETE) != 0) | (known < np.maximum(warps, 1))
    bound[incomplete] = NO_BOUND
    maker[incomplete | (bound == NO_BOUND)] = -1
    return bound, known, maker


def next_later_start(group: np.ndarray, start: np.ndarray, with_rows: bool = False):
    """For each row, the smallest start of its group (>= 0) that is strictly later than
    its own (NO_BOUND where none is). Equal starts in one slot cannot say which block
    held it first, so neither bounds the other: both take the next later start,
    which bounds them whichever came first. with_rows: also the row of that start
    (one of them where several share it; -1 where none)."""
    if len(group) == 0:
        return (np.zeros(0, np.uint64), np.zeros(0, np.int64)) if with_rows else np.zeros(0, np.uint64)
    # One sortable key per row: the group above the time since the first start (two where they do not fit).
    base = np.uint64(int(start.min()))
    bits = max(1, (int(start.max()) - int(base)).bit_length())
    if int(group.max()).bit_length() + bits <= 64:
        key = (group.astype(np.uint64) << np.uint64(bits)) | (start - base)
        order = np.argsort(key)
        key = key[order]
        g, t = key >> np.uint64(bits), key
    else:
        order = np.lexsort((start, group))
        g, t = group[order], start[order]
    new_run = np.r_[True, (g[1:] != g[:-1]) | (t[1:] != t[:-1])]
    first = np.flatnonzero(new_run)
    run = np.cumsum(new_run) - 1
    next_time = np.full(len(first), NO_BOUND, np.uint64)
    same_group = g[first[1:]] == g[first[:-1]]
    next_time[:-1][same_group] = start[order[first[1:]]][same_group]
    out = np.empty(len(group), np.uint64)
    out[order] = next_time[run]
    if not with_rows:
        return out
    next_row = np.full(len(first), -1, np.int64)
    next_row[:-1][same_group] = order[first[1:]][same_group]
    rows = np.empty(len(group), np.int64)
    rows[order] = next_row[run]
    return out, rows


def stream_bounds(rec: Recording, launch: np.ndarray, start: np.ndarray, with_makers: bool = False):
    """Per block: the first block start of the next launch on its stream (module doc).
    with_makers: also that next launch (index into rec.launches, -1 where none)."""
    bound = np.full(len(launch), NO_BOUND, np.uint64)
    maker = np.full(len(launch), -1, np.int64)
    launches = rec.launches
    resolved = launch >= 0
    if len(launches) == 0 or not resolved.any():
        return (bound, maker) if with_makers else bound
    first_start = np.full(len(launches), NO_BOUND, np.uint64)
    np.minimum.at(first_start, launch[resolved], start[resolved])
    last_start = np.zeros(len(launches), np.uint64)
    np.maximum.at(last_start, launch[resolved], start[resolved])
    recorded = np.flatnonzero(first_start != NO_BOUND)
    # Launches with blocks, in stream order; each one's successor is the next row.
    order = recorded[
        np.lexsort(
            (launches["launch_id"][recorded], launches["stream_id"][recorded], launches["device_index"][recorded])
        )
    ]
    same_stream = (launches["device_index"][order][1:] == launches["device_index"][order][:-1]) & (
        launches["stream_id"][order][1:] == launches["stream_id"][order][:-1]
    )
    plain = (launches["flags"][order] & NOT_PLAIN) == 0
    # In stream order every block of the next kernel starts after every block of this
    # one has ended, so after they all started: where not (launch ids that do not
    # follow enqueue order, threads sharing a stream; or an early dependent launch),
    # the pair bounds nothing.
    in_order = first_start[order[1:]] >= last_start[order[:-1]]
    chained = same_stream & plain[:-1] & plain[1:] & in_order
    next_start = np.full(len(launches), NO_BOUND, np.uint64)
    next_start[order[:-1][chained]] = first_start[order[1:][chained]]
    bound[resolved] = next_start[launch[resolved]]
    if not with_makers:
        return bound
    next_launch = np.full(len(launches), -1, np.int64)
    next_launch[order[:-1][chained]] = order[1:][chained]
    maker[resolved] = next_launch[launch[resolved]]
    return bound, maker


def quiet_bounds(rec: Recording, launch: np.ndarray) -> np.ndarray:
    """Per block: the quiet point of the flush window that lists its launch, if any."""
    bound = np.full(len(launch), NO_BOUND, np.uint64)
    quiet = rec.slots[rec.slots["device_quiet_ns"] != 0]
    resolved = np.flatnonzero(launch >= 0)
    if len(quiet) == 0 or len(resolved) == 0:
        return bound
    key = (quiet["device_index"].astype(np.uint64) << np.uint64(32)) | quiet["flush_seq"].astype(np.uint64)
    by_key = np.argsort(key, kind="stable")
    key = key[by_key]
    mine = launch[resolved]
    want = (rec.launches["device_index"][mine].astype(np.uint64) << np.uint64(32)) | rec.launch_flushes[mine].astype(
        np.uint64
    )
    at = np.minimum(np.searchsorted(key, want), len(key) - 1)
    hit = key[at] == want
    bound[resolved[hit]] = quiet["device_quiet_ns"][by_key][at[hit]]
    return bound


@dataclass
class BoundCounts:
    """Per launch (aligned with rec.launches): its block events and how their ends are bounded."""

    blocks: np.ndarray  # int64
    by_quality: np.ndarray  # int64 (launches, len(EndBound)): blocks per EndBound value
    slots_incomplete: np.ndarray  # int64: blocks flagged GPUOBS_BLOCK_SLOTS_INCOMPLETE
    weak: np.ndarray = None  # int64: blocks whose bound is weak


def counts_by_launch(rec: Recording, ends: BlockEnds) -> BoundCounts:
    n = len(rec.launches)
    ok = ends.launch >= 0
    launch, quality = ends.launch[ok], ends.quality[ok].astype(np.int64)
    by_quality = np.bincount(launch * len(EndBound) + quality, minlength=n * len(EndBound))
    incomplete = (rec.events["flags"][ends.rows[ok]] & SLOTS_INCOMPLETE) != 0
    return BoundCounts(
        blocks=np.bincount(launch, minlength=n)[:n],
        by_quality=by_quality[: n * len(EndBound)].reshape(n, len(EndBound)),
        slots_incomplete=np.bincount(launch[incomplete], minlength=n)[:n],
        weak=np.bincount(launch[ends.weak[ok]], minlength=n)[:n] if ends.weak is not None else np.zeros(n, np.int64),
    )


def launch_end_quality(ends: BlockEnds, n_launches: int, with_weak: bool = False):
    """Per launch: (the latest end bound of its blocks, what bounds it). A launch with
    a block of no bound gets EndBound.NONE: its end may be later than any bound.
    with_weak: also whether that latest bound is weak (one of the blocks holding it
    has a weak bound): the launch's span then may include host time."""
    ok = ends.launch >= 0
    launch, end, quality = ends.launch[ok], ends.end_bound_ns[ok], ends.quality[ok]
    latest = np.zeros(n_launches, np.uint64)
    np.maximum.at(latest, launch, end)
    # what bounds the latest end: of the blocks that hold it, the weakest bound
    kind = np.zeros(n_launches, np.uint8)
    at_latest = end == latest[launch]
    np.maximum.at(kind, launch[at_latest], quality[at_latest])
    unbounded = np.bincount(launch[quality == EndBound.NONE], minlength=n_launches)[:n_launches] > 0
    kind[unbounded] = EndBound.NONE
    if not with_weak:
        return latest, kind
    weak = np.zeros(n_launches, bool)  # also where some block has no bound: the latest bound is still weak
    if ends.weak is not None:
        weak[np.unique(launch[at_latest & ends.weak[ok]])] = True
    return latest, kind, weak
