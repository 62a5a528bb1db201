"""Lanes: Perfetto closes a slice with the most recent open one on its track, so
slices that overlap in one group (blocks on one SM, events of one thread) must
sit on separate lane tracks. Lanes are handed out first-fit in start order (a
slice takes the lowest lane free at its start), in C (native_encoder.c) or, for
all groups at once, with numpy: the loop runs over the k-th slice of every group,
not over slices. Both give the same lanes.

Which slices may share a lane: touching ones do ([a, b] then [b, c]); a
zero-length slice at t shares no lane with a slice that contains t, its start
and end included, nor with another zero-length slice at t: it nests beside its
parent. On a lane, one time then holds either an END and the next BEGIN or one
zero-length slice alone, which is what slice_encoder's packet order needs."""

from __future__ import annotations

from typing import Callable

import numpy as np


def group_sort_keys(group: np.ndarray, values: np.ndarray, bits: int) -> np.ndarray | None:
    """One sortable uint64 per row: its group (>= 0) in the high bits, its value
    (below 2**bits) in the low ones; None where the groups do not fit above them."""
    if bits >= 64 or (len(group) and int(group.max()) >= 1 << (64 - bits)):
        return None
    return (np.asarray(group, np.uint64) << np.uint64(bits)) | np.asarray(values, np.uint64)


def _sort(group, times, bits):
    keys = group_sort_keys(group, times, bits)
    if keys is None:
        return np.lexsort((times, group)), None
    order = np.argsort(keys, kind="stable")
    return order, keys[order]


def _ranks(group: np.ndarray):
    uniq, first, counts = np.unique(group, return_index=True, return_counts=True)
    rank = np.arange(len(group)) - np.repeat(first, counts)
    return uniq, counts, np.repeat(np.arange(len(uniq)), counts), rank


def _half_open(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slices as half-open intervals on a doubled time axis from the earliest start,
    under the rule above: [s, e] with s < e becomes [2s+1, 2e+1), a zero-length
    slice at t becomes [2t, 2t+2)."""
    base = np.uint64(int(start.min()))
    s = np.asarray(start, np.uint64) - base
    e = np.asarray(end, np.uint64) - base
    s <<= np.uint64(1)
    e <<= np.uint64(1)
    zero = (s == e).view(np.uint8)
    s += np.uint64(1)
    s -= zero
    e += np.uint64(1)
    e += zero
    return s, e


def _max_open(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """Most half-open intervals open at once within any group (touching ones do not overlap)."""
    if len(group) == 0:
        return 0
    bits = int(end.max()).bit_length()
    order_s, start_keys = _sort(group, start, bits)
    order_e, end_keys = _sort(group, end, bits)
    if start_keys is None:
        return int(np.bincount(np.unique(group, return_inverse=True)[1]).max())  # safe upper bound
    _, _, _, rank = _ranks(group[order_s])
    # ends (of any earlier group, or of this group at or before the start)
    ends_before = np.searchsorted(end_keys, start_keys, side="right")
    groups_before = np.searchsorted(end_keys, (start_keys >> np.uint64(bits)) << np.uint64(bits), side="left")
    return int((rank + 1 - (ends_before - groups_before)).max())


def _native(group: np.ndarray, start, end, n_groups: int):
    """(lanes, lanes per group) from native_encoder.c's one pass (sort and first fit),
    or None: no C, or a case it leaves to the numpy path below (the same lanes)."""
    from . import native_encoder

    if not len(group) or native_encoder.encoder() is None:
        return None
    return native_encoder.lanes(group, np.asarray(start), np.asarray(end), n_groups)


def assign_lanes(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane index per slice (end >= start); slices of one group on one lane never
    overlap, under the rule above."""
    n = len(group)
    lanes = np.zeros(n, np.int64)
    if n == 0:
        return lanes
    group = np.asarray(group)
    if group.dtype.kind in "iu" and int(group.min()) >= 0:
        fast = _native(group, start, end, int(group.max()) + 1)
        if fast is not None:
            return fast[0]
    return _assign_lanes(group, start, end, lanes)


def _assign_lanes(group, start, end, lanes) -> np.ndarray:
    """assign_lanes' numpy path (with the C first fit over sorted slices where it can)."""
    start, end = _half_open(start, end)
    order, _ = _sort(group, start, int(end.max()).bit_length())
    g, s, e = group[order], start[order], end[order]
    from . import native_encoder

    if native_encoder.encoder() is not None:
        chosen = native_encoder.assign_lanes_sorted(g, s, e)
        if chosen is not None:
            lanes[order] = chosen
            return lanes
    uniq, counts, gi, rank = _ranks(g)
    width = max(1, _max_open(group, start, end))
    n_groups, depth = len(uniq), int(counts.max())
    starts = np.zeros((n_groups, depth), np.uint64)
    ends = np.zeros((n_groups, depth), np.uint64)
    starts[gi, rank] = s
    ends[gi, rank] = e
    lane_free_at = np.zeros((n_groups, width), np.uint64)
    chosen = np.zeros((n_groups, depth), np.int64)
    rows = np.arange(n_groups)
    for k in range(depth):
        live = counts > k
        free = lane_free_at <= starts[:, k : k + 1]
        lane = np.argmax(free, axis=1)
        chosen[:, k] = lane
        lane_free_at[rows[live], lane[live]] = ends[live, k]
    lanes[order] = chosen[gi, rank]
    return lanes


class LaneTracks:
    """of_slice: uint64, each slice's lane track; lanes: int64 per group (0..max group),
    how many lanes it has; first: group -> the track of its first lane (made when read)."""

    def __init__(self, of_slice: np.ndarray, made: np.ndarray, lanes: np.ndarray, offset: np.ndarray):
        # made: every lane's track, group by group; offset[g]: where group g's lanes begin in it
        self.of_slice, self.lanes, self._made, self._offset = of_slice, lanes, made, offset

    @property
    def first(self) -> dict:
        groups = np.flatnonzero(self.lanes)
        return dict(zip(groups.tolist(), self._made[self._offset[groups]].tolist()))


def lane_tracks(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    new_track: Callable[[int], int] | None = None,
    new_tracks: Callable[[np.ndarray], np.ndarray] | None = None,
) -> LaneTracks:
    """Lanes for slices (assign_lanes) and a track for each: new_track(g) makes one
    track of group g (>= 0) and returns its uuid; it is called once per lane, group
    by group in ascending order. Or new_tracks(lanes), given how many lanes each group
    has, makes them all at once and returns their uuids in that order."""
    group = np.asarray(group, np.int64)
    fast = _native(group, start, end, int(group.max()) + 1) if len(group) and int(group.min()) >= 0 else None
    if fast is not None:
        lane, lanes = fast
    else:  # the numpy path (the one C pass above already declined these slices)
        lane = _assign_lanes(group, start, end, np.zeros(len(group), np.int64)) if len(group) else group
        lanes = np.zeros(int(group.max()) + 1 if len(group) else 0, np.int64)
        np.maximum.at(lanes, group, lane + 1)
    if new_tracks is not None:
        made = np.asarray(new_tracks(lanes), np.uint64)
    else:
        made = np.array([new_track(g) for g in np.repeat(np.arange(len(lanes)), lanes).tolist()], np.uint64)
    # no (groups x most lanes) table: a slice's track is made[offset of its group + its lane]
    offset = np.zeros(len(lanes), np.int64)
    np.cumsum(lanes[:-1], out=offset[1:])
    return LaneTracks(_slice_tracks(group, lane, offset, made), made, lanes, offset)


def _slice_tracks(group: np.ndarray, lane: np.ndarray, offset: np.ndarray, made: np.ndarray) -> np.ndarray:
    """made[offset[group] + lane]: native_encoder.c's one pass where it is built (no column
    of the positions), else numpy's gathers."""
    from . import native_encoder

    if len(group) and native_encoder.encoder() is not None:
        track = native_encoder.slice_tracks(group, lane, offset, made)
        if track is not None:
            return track
    at = offset[group]
    at += lane
    return made[at]
