"""The one slice encoder: every slice of a trace (kernels, blocks, CUDA API calls,
host-trace events) is written here, as a BEGIN and an END TrackEvent packet.

Order. Perfetto closes a slice with the most recent open one on its track, so the
packets of one lane track must come B1 E1 B2 E2 ... . Lanes from lanes.py
(assign_lanes, lane_tracks) allow that with one sort of all packets by
(sequence group, time, rank):
  rank 0: the END of a slice with a length (it closes before anything opens then),
  rank 1: a BEGIN,
  rank 2: the END of a zero-length slice (right after its own BEGIN),
and packet index (BEGINs, then ENDs, each in slice order) among equal keys. On a
lane, one time holds either an END and the next BEGIN, or one zero-length slice
alone (lanes.py), so every END closes the slice its lane opened last.

Encoding. A C pass (native_encoder.c) where a C compiler is at hand, else numpy
columns (protowire.Rows), a batch of packets at a time; both write the same
bytes (tests/test_slice_encoder.py).

    slices = Slices(track=lane_uuid, start=start, end=end, name_iid=name_iid)
    slices.int_arg(1, launch_ids, at_least=0)         # or present=mask
    slices.string_arg(2, [b"runtime", b"driver", ...])
    write_slices(w, slices, seq, clock_id=MONOTONIC)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from . import native_encoder
from .lanes import group_sort_keys
from .protowire import (
    ANNOTATION_BOOL_VALUE,
    ANNOTATION_INT_VALUE,
    ANNOTATION_NAME_IID,
    ANNOTATION_STRING_VALUE,
    PACKET_SEQUENCE_FLAGS,
    PACKET_SEQUENCE_ID,
    PACKET_TIMESTAMP,
    PACKET_TIMESTAMP_CLOCK_ID,
    PACKET_TRACK_EVENT,
    TRACK_EVENT_DEBUG_ANNOTATIONS,
    TRACK_EVENT_FLOW_IDS,
    TRACK_EVENT_NAME_IID,
    TRACK_EVENT_TERMINATING_FLOW_IDS,
    TRACK_EVENT_TRACK_UUID,
    TRACK_EVENT_TYPE,
    Rows,
)
from .trace_writer import SEQ_NEEDS, TraceWriter

BEGIN, END = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END
INT, BOOL, STRING = native_encoder.ARG_INT, native_encoder.ARG_BOOL, native_encoder.ARG_STRING  # argument kinds
MAX_ARGS = native_encoder.MAX_ARGS  # arguments per slice (native_encoder.c plans each packet's in a fixed array)
PACKETS_PER_BATCH = 1 << 17  # encoded at a time: the numpy path's memory stays bounded


@dataclass
class Arg:
    """One debug annotation (interned name) on the BEGIN of each slice where `present`."""

    name_iid: int
    kind: int  # INT, BOOL (always true) or STRING
    present: Optional[np.ndarray] = None  # bool per slice; None: on every slice
    ints: Optional[np.ndarray] = None  # INT: per slice, any integer type, as given (no copy); STRING: a choice
    # (starts and lengths per choice, ints[e] slice e's), or None (per slice)
    at_least: Optional[int] = None  # INT: left out where the value is below this
    chars: Optional[np.ndarray] = None  # STRING: uint8, slice e's value is chars[starts[e] : starts[e] + lengths[e]]
    starts: Optional[np.ndarray] = None
    lengths: Optional[np.ndarray] = None


class Slices:
    """Slices to write: per slice its lane track, start, end (>= start: callers
    clip, as they assign lanes on the same times) and interned name; debug
    annotations and flows go on its BEGIN, in the order added."""

    def __init__(self, track, start, end, name_iid):
        self.track = np.asarray(track, np.uint64)
        self.start = np.asarray(start, np.uint64)
        self.end = np.asarray(end, np.uint64)
        self.name_iid = np.asarray(name_iid, np.uint64)
        self.n = len(self.start)
        if not len(self.track) == len(self.end) == len(self.name_iid) == self.n:
            raise ValueError("slice columns differ in length")
        self.args: list[Arg] = []
        self.flow_field = 0
        self.flows = self.flow_counts = None

    def _add(self, arg: Arg) -> "Slices":
        if len(self.args) == MAX_ARGS:
            raise ValueError(f"more than {MAX_ARGS} arguments per slice")
        self.args.append(arg)
        return self

    def _mask(self, present):
        return None if present is None else np.broadcast_to(np.asarray(present, bool), (self.n,))

    def int_arg(self, name_iid: int, values, present=None, at_least: int | None = None) -> "Slices":
        """values: any integer array, read in place (a record field, a narrow type);
        at_least: left out where the value is below it (e.g. 0 where -1 means none)."""
        ints = np.asarray(values)
        if ints.dtype.kind not in "iu":
            ints = ints.astype(np.int64)
        elif ints.dtype == np.uint64:
            ints = ints.view(np.int64)  # DebugAnnotation.int_value is an int64, on both paths
        ints = np.broadcast_to(ints, (self.n,))
        return self._add(Arg(name_iid, INT, self._mask(present), ints=ints, at_least=at_least))

    def bool_arg(self, name_iid: int, present=None) -> "Slices":
        """A true bool annotation (the mark itself is the information)."""
        return self._add(Arg(name_iid, BOOL, self._mask(present)))

    def string_arg(self, name_iid: int, values: Sequence[bytes], present=None) -> "Slices":
        """values[e]: slice e's string, as bytes."""
        lengths = np.fromiter((len(v) for v in values), np.int64, self.n)
        starts = np.zeros(self.n, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return self._string(name_iid, b"".join(values), starts, lengths, present)

    def choice_arg(self, name_iid: int, choices: Sequence[bytes], which, present=None) -> "Slices":
        """Slice e's string is choices[which[e]] (few distinct values: no per-slice Python)."""
        lengths = np.array([len(c) for c in choices], np.int64)
        starts = np.cumsum(lengths) - lengths
        which = np.asarray(which)
        if which.dtype == bool:
            which = which.view(np.uint8)
        if which.dtype.kind in "iu" and which.ndim == 1 and len(which) == self.n:
            if not self.n or (int(which.min()) >= 0 and int(which.max()) < len(choices)):
                # read in place at each slice (no per-slice starts and lengths: two int64 per slice)
                return self._string(name_iid, b"".join(choices), starts, lengths, present, which)
        which = np.asarray(which, np.int64)
        return self._string(name_iid, b"".join(choices), starts[which], lengths[which], present)

    def _string(self, name_iid, chars: bytes, starts, lengths, present, which=None) -> "Slices":
        return self._add(
            Arg(
                name_iid,
                STRING,
                self._mask(present),
                ints=which,
                chars=np.frombuffer(chars, np.uint8),
                starts=starts,
                lengths=lengths,
            )
        )

    def flows_out(self, flows, counts) -> "Slices":
        """TrackEvent.flow_ids: slice e starts flows[e, :counts[e]] ((n, k) array)."""
        return self._flows(TRACK_EVENT_FLOW_IDS, flows, counts)

    def flows_in(self, flows, counts) -> "Slices":
        """TrackEvent.terminating_flow_ids: slice e ends flows[e, :counts[e]]."""
        return self._flows(TRACK_EVENT_TERMINATING_FLOW_IDS, flows, counts)

    def _flows(self, field, flows, counts) -> "Slices":
        self.flow_field = field
        self.flows = np.asarray(flows, np.uint64).reshape(self.n, -1)
        self.flow_counts = np.minimum(np.asarray(counts, np.int64), self.flows.shape[1])
        return self


@dataclass
class PacketOrder:
    """The BEGIN and END packets of slices in writing order (see the module doc)."""

    slice: np.ndarray  # int64 per packet: its slice
    is_begin: np.ndarray  # bool per packet
    time: np.ndarray  # uint64 per packet
    group: np.ndarray  # int64 per packet: its slice's group (one packet sequence each)

    def group_starts(self) -> np.ndarray:
        """Index of each group's first packet, groups in ascending order."""
        return np.flatnonzero(np.r_[True, self.group[1:] != self.group[:-1]])


def packet_order(start: np.ndarray, end: np.ndarray, group: np.ndarray | None = None) -> PacketOrder:
    """Packets sorted by (group, time, rank), ties in packet index (stable)."""
    n = len(start)
    start, end = np.asarray(start, np.uint64), np.asarray(end, np.uint64)
    base = np.uint64(int(start.min()) if n else 0)
    bits = (int(end.max()) - int(base)).bit_length() + 2 if n else 2
    if n and native_encoder.encoder() is not None:
        # native_encoder.c: the same sort of the same keys in one pass (runs found, not
        # re-sorted), written straight into the packets' columns
        g = None if group is None else np.ascontiguousarray(group, np.uint64)
        if bits < 64 and (g is None or int(g.max()) < 1 << (64 - bits)):
            fast = native_encoder.packet_order(
                np.ascontiguousarray(start), np.ascontiguousarray(end), g, int(base), bits
            )
            if fast is not None:
                slice_, is_begin, time, groups = fast
                # no group: every packet's is 0 (np.zeros: pages the kernel zeroes only if read)
                return PacketOrder(slice_, is_begin, time, np.zeros(2 * n, np.int64) if groups is None else groups)
    g = np.zeros(n, np.uint64) if group is None else np.asarray(group, np.uint64)
    zero = start == end
    # Rank and time of each BEGIN (row 0) and END (row 1) in one value...
    value = np.empty((2, n), np.uint64)
    np.subtract(start, base, out=value[0])
    np.subtract(end, base, out=value[1])
    value <<= np.uint64(2)
    value[0] |= np.uint64(1)
    value[1] |= zero.view(np.uint8) << np.uint8(1)
    # ...and the group above it: one sort key per packet, from which the sorted
    # keys give back group and time without gathering them again.
    key = group_sort_keys(g, value, bits)
    if key is not None:
        key = key.ravel()
        order = np.argsort(key, kind="stable")
        key = key[order]
        time = ((key & np.uint64((1 << bits) - 1)) >> np.uint64(2)) + base
        groups = (key >> np.uint64(bits)).astype(np.int64)
    else:
        times = np.concatenate([start, end])
        gs = np.concatenate([g, g])
        order = np.lexsort((value.ravel() & np.uint64(3), times, gs))
        time, groups = times[order], gs[order].astype(np.int64)
    is_begin = order < n
    return PacketOrder(np.where(is_begin, order, order - n), is_begin, time, groups)


def write_packets(
    w: TraceWriter, order: PacketOrder, slices: Slices, seq, timestamps=None, tracks=None, clock_id: int | None = None
) -> None:
    """Writes the packets as Trace.packet entries, PACKETS_PER_BATCH at a time.

    seq: the trusted_packet_sequence_id, one for all or one per packet; timestamps:
    per packet (default: order.time; deltas on an incremental clock go here);
    tracks: per packet, 0 where the sequence's default track applies (default:
    each slice's track); clock_id: timestamp_clock_id on every packet (None: none).
    BEGINs carry SEQ_NEEDS_INCREMENTAL_STATE: names are interned."""
    n = len(order.slice)
    ts = order.time if timestamps is None else np.asarray(timestamps, np.uint64)
    seq = np.asarray(seq, np.uint64)
    for lo in range(0, n, PACKETS_PER_BATCH):
        part = slice(lo, lo + PACKETS_PER_BATCH)
        e, begin = order.slice[part], order.is_begin[part]
        track = slices.track[e] if tracks is None else np.asarray(tracks[part], np.uint64)
        _write_batch(w, slices, e, begin, ts[part], track, seq if seq.ndim == 0 else seq[part], clock_id)


def _write_batch(w: TraceWriter, slices: Slices, e, begin, ts, track, seq, clock_id) -> None:
    if native_encoder.encoder() is not None:
        w.raw(
            native_encoder.encode_slices(
                e, begin, ts, track, np.broadcast_to(seq, (len(e),)), *_per_slice(slices, clock_id)
            )
        )
    else:
        w.rows(_rows(e, begin, slices, seq, ts, track, clock_id))


def write_slices(w: TraceWriter, slices: Slices, seq: int, clock_id: int | None = None) -> int:
    """All slices on one packet sequence, absolute timestamps; returns the packet count."""
    if slices.n == 0:
        return 0
    walked = _walked(slices, seq, clock_id)
    if walked is None:
        write_packets(w, packet_order(slices.start, slices.end), slices, seq, clock_id=clock_id)
    else:  # packet_order's packets walked and encoded by native_encoder.c a batch at a time: no column of them
        for packets in walked:
            w.raw(packets)
    return 2 * slices.n


def _walked(slices: Slices, seq: int, clock_id: int | None):
    """write_slices' packets from native_encoder.c, batch by batch, or None where
    packet_order itself must make them (no C, keys past 64 bits, no scratch)."""
    if native_encoder.encoder() is None:
        return None
    start, end = np.ascontiguousarray(slices.start, np.uint64), np.ascontiguousarray(slices.end, np.uint64)
    base = int(start.min())
    bits = (int(end.max()) - base).bit_length() + 2
    if bits >= 64:
        return None
    return native_encoder.walked_slices(
        start, end, base, bits, PACKETS_PER_BATCH, slices.track, int(seq), *_per_slice(slices, clock_id)
    )


def _per_slice(slices: Slices, clock_id: int | None) -> tuple:
    """What native_encoder's slice encoders take after the packets' own columns: names,
    arguments, clock, BEGINs' flags and flows."""
    return slices.name_iid, slices.args, clock_id or 0, SEQ_NEEDS, slices.flow_field, slices.flows, slices.flow_counts


def _rows(e, begin, slices: Slices, seq, ts, track, clock_id) -> Rows:
    """The numpy path: the same bytes as native_encoder.c (packets of slices e)."""
    n = len(e)
    te = (
        Rows(n)
        .varint_field(TRACK_EVENT_TYPE, np.where(begin, BEGIN, END))
        .varint_field(TRACK_EVENT_TRACK_UUID, track, present=track != 0)
        .varint_field(TRACK_EVENT_NAME_IID, slices.name_iid[e], present=begin)
    )
    for arg in slices.args:
        ann = Rows(n).varint_field(ANNOTATION_NAME_IID, arg.name_iid)
        if arg.kind == INT:
            ann.sint_as_varint_field(ANNOTATION_INT_VALUE, arg.ints[e])
        elif arg.kind == BOOL:
            ann.varint_field(ANNOTATION_BOOL_VALUE, 1)
        else:
            v = e if arg.ints is None else arg.ints[e]
            ann.bytes_field(ANNOTATION_STRING_VALUE, arg.chars, arg.starts[v], arg.lengths[v])
        present = begin if arg.present is None else begin & arg.present[e]
        if arg.at_least is not None:
            present = present & (arg.ints[e] >= arg.at_least)
        te.message_field(TRACK_EVENT_DEBUG_ANNOTATIONS, ann, present=present)
    if slices.flow_field:
        te.fixed64_repeated_field(slices.flow_field, slices.flows[e], np.where(begin, slices.flow_counts[e], 0))
    packets = Rows(n).varint_field(PACKET_TIMESTAMP, ts)
    if clock_id:
        packets.varint_field(PACKET_TIMESTAMP_CLOCK_ID, clock_id)
    return (
        packets.message_field(PACKET_TRACK_EVENT, te)
        .varint_field(PACKET_SEQUENCE_ID, seq)
        .varint_field(PACKET_SEQUENCE_FLAGS, SEQ_NEEDS, present=begin)
    )
