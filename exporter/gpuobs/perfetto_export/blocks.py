"""Block slices in bulk: one packet sequence per SM, begin/end packets in time
order with delta timestamps (an incremental clock), kernel names interned, lane
tracks given only where a block is not on the SM's first lane."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from . import native_encoder
from .clock import ClockRelation
from .protowire import Rows
from .trace_writer import SEQ_CLEARED, SEQ_NEEDS, TraceWriter

INCREMENTAL_CLOCK = 64  # sequence-scoped clock ids are 64..127
BEGIN, END = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END
ARG_NAMES = {"block": 1, "launch": 2, "block_y": 3, "block_z": 4}
TIME_BITS = 44


@dataclass
class BlockSlices:
    """The blocks of one GPU, ready to encode (all arrays aligned)."""

    sm: np.ndarray          # int64
    start: np.ndarray       # uint64 device ns
    end: np.ndarray         # uint64 device ns
    lane_uuid: np.ndarray   # uint64 track uuid of each block's lane
    name_iid: np.ndarray    # uint64 interned kernel name
    launch_id: np.ndarray   # int64, -1 when unresolved
    block_x: np.ndarray     # uint32, as recorded
    block_y: np.ndarray     # uint16
    block_z: np.ndarray     # uint16


def _packet_order(sm: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Begin and end packets sorted by (SM, time); at equal times an end closes
    before a begin opens, except the end of a zero-length block after its begin.
    Returns (order, sm, time) of the sorted packets; order[i] < n marks a begin
    of block order[i], else the end of block order[i] - n."""
    n = len(sm)
    base = int(start.min())
    sm64 = sm.astype(np.uint64)
    span = int(end.max()) - base
    if span < 1 << TIME_BITS and int(sm64.max()) < 1 << (62 - TIME_BITS):
        # One key per packet: SM, then time, then the tie rank; the sorted keys
        # give back SM and time without gathering them again.
        high = sm64 << np.uint64(TIME_BITS + 2)
        begin_key = high | ((start - np.uint64(base)) << np.uint64(2)) | np.uint64(1)
        end_rank = (start == end).astype(np.uint64) << np.uint64(1)
        end_key = high | ((end - np.uint64(base)) << np.uint64(2)) | end_rank
        key = np.concatenate([begin_key, end_key])
        order = np.argsort(key, kind="stable")
        key = key[order]
        t = ((key >> np.uint64(2)) & np.uint64((1 << TIME_BITS) - 1)) + np.uint64(base)
        return order, (key >> np.uint64(TIME_BITS + 2)).astype(np.int64), t
    times = np.concatenate([start, end]).astype(np.uint64)
    rank = np.concatenate([np.ones(n, np.uint64), np.where(start == end, 2, 0).astype(np.uint64)])
    sms = np.concatenate([sm, sm])
    order = np.lexsort((rank, times, sms))
    return order, sms[order].astype(np.int64), times[order]


def encode_blocks(w: TraceWriter, b: BlockSlices, names: dict[int, str], sm_lane0_uuid: dict[int, int],
                  clock: ClockRelation, block_args: bool = True) -> int:
    """Writes every block's begin/end; returns the number of packets."""
    n = len(b.sm)
    if n == 0:
        return 0
    order, sm, t = _packet_order(b.sm, b.start, b.end)
    is_begin = order < n
    event = np.where(is_begin, order, order - n)
    boundaries = np.flatnonzero(np.r_[True, sm[1:] != sm[:-1]])
    seq_ids = {int(sm[i]): w.new_sequence() for i in boundaries}
    seq = np.array([seq_ids[int(s)] for s in sm[boundaries]], np.uint64)
    seq_of_packet = np.repeat(seq, np.diff(np.r_[boundaries, len(sm)]))

    # The first packet of each SM's sequence: interned names, defaults, clock.
    # which kernel names each SM's sequence needs interned
    uses = np.zeros((int(sm.max()) + 1, int(b.name_iid.max()) + 1), bool)
    uses[b.sm, b.name_iid.astype(np.int64)] = True
    for i in boundaries:
        s = int(sm[i])
        pkt = pb.TracePacket(trusted_packet_sequence_id=seq_ids[s], sequence_flags=SEQ_CLEARED,
                             first_packet_on_sequence=True)
        for iid in np.flatnonzero(uses[s]):
            pkt.interned_data.event_names.add(iid=int(iid), name=names[int(iid)])
        for arg, iid in ARG_NAMES.items():
            pkt.interned_data.debug_annotation_names.add(iid=iid, name=arg)
        pkt.trace_packet_defaults.track_event_defaults.track_uuid = sm_lane0_uuid[s]
        if clock.measured:
            pkt.trace_packet_defaults.timestamp_clock_id = INCREMENTAL_CLOCK
            pkt.clock_snapshot.clocks.add(clock_id=INCREMENTAL_CLOCK, timestamp=int(t[i]), is_incremental=True)
            pkt.clock_snapshot.clocks.add(clock_id=clock.clock_id, timestamp=int(t[i]))
        w.packet(pkt)

    if clock.measured:
        ts = np.zeros(len(t), np.uint64)
        ts[1:] = t[1:] - t[:-1]
        ts[boundaries] = 0  # each sequence starts at its snapshot value
    else:
        ts = t  # device mode: absolute device ns, no clock id
    lane_uuid = b.lane_uuid[event]
    default_lane = np.array([sm_lane0_uuid[int(s)] for s in sm[boundaries]], np.uint64)
    not_default = lane_uuid != np.repeat(default_lane, np.diff(np.r_[boundaries, len(sm)]))
    track = np.where(not_default, lane_uuid, 0).astype(np.uint64)
    if native_encoder.encoder() is not None:
        w.raw(native_encoder.encode_blocks(event, ts, is_begin, track, seq_of_packet, b.name_iid, b.block_x,
                                           b.block_y, b.block_z, b.launch_id, with_args=block_args,
                                           flags=SEQ_NEEDS))
    else:
        w.rows(_rows(ts, is_begin, track, b.name_iid[event], seq_of_packet, b.block_x[event].astype(np.int64),
                     b.block_y[event].astype(np.int64), b.block_z[event].astype(np.int64), b.launch_id[event],
                     with_args=block_args))
    return len(t)


def _rows(ts, is_begin, track, name_iid, seq, bx, by, bz, launch, with_args: bool) -> Rows:
    """The numpy encoder: the same bytes as native_encoder.c."""
    te = (Rows(len(ts))
          .varint_field(9, np.where(is_begin, BEGIN, END))
          .varint_field(11, track, present=track != 0)
          .varint_field(10, name_iid, present=is_begin))
    if with_args:
        for arg, values, present in (("block", bx, is_begin), ("block_y", by, is_begin & (by > 0)),
                                     ("block_z", bz, is_begin & (bz > 0)), ("launch", launch, is_begin & (launch >= 0))):
            ann = Rows(len(ts)).varint_field(1, ARG_NAMES[arg]).sint_as_varint_field(4, values)
            te.message_field(4, ann, present=present)
    return (Rows(len(ts)).varint_field(8, ts).message_field(11, te)
            .varint_field(10, seq).varint_field(13, SEQ_NEEDS, present=is_begin))
