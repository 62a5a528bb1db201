"""Block slices in bulk: one packet sequence per SM, begin/end packets in time
order with delta timestamps (an incremental clock), kernel names interned, lane
tracks given only where a block is not on the SM's first lane."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .block_bounds import NOTE_CHOICES, UNCONFIRMED_NOTE
from .clock import ClockRelation
from .slice_encoder import Slices, packet_order, write_packets
from .trace_writer import SEQ_CLEARED, TraceWriter

INCREMENTAL_CLOCK = 64  # sequence-scoped clock ids are 64..127
ARG_NAMES = {"block": 1, "launch": 2, "block_y": 3, "block_z": 4}
# block_starts: which upper bound a block's end is; block_trace: that a later run stamped it
# (interned only where some block of the batch has one)
END_ARG = ("end", 5)


@dataclass
class BlockSlices:
    """The blocks of one GPU, ready to encode (all arrays aligned)."""

    sm: np.ndarray  # int64
    start: np.ndarray  # uint64 device ns
    end: np.ndarray  # uint64 device ns
    lane_uuid: np.ndarray  # uint64 track uuid of each block's lane
    name_iid: np.ndarray  # uint64 interned kernel name
    launch_id: np.ndarray  # int64, -1 when unresolved
    block_x: np.ndarray  # uint32, as recorded
    block_y: np.ndarray  # uint16
    block_z: np.ndarray  # uint16
    end_quality: Optional[np.ndarray] = None  # block_starts: uint8 EndBound of each end (block_bounds.py)
    end_unconfirmed: Optional[np.ndarray] = None  # block_trace: bool, the end a later run stamped (drawn at start)

    def end_noted(self) -> bool:
        """Whether some block's end gets an `end` argument."""
        return self.end_quality is not None or self.end_unconfirmed is not None


def encode_blocks(
    w: TraceWriter,
    b: BlockSlices,
    names: dict[int, str],
    sm_lane0_uuid: dict[int, int],
    clock: ClockRelation,
    block_args: bool = True,
) -> int:
    """Writes every block's begin/end; returns the number of packets."""
    if len(b.sm) == 0:
        return 0
    order = packet_order(b.start, b.end, group=b.sm)
    sm, t = order.group, order.time
    boundaries = order.group_starts()
    packets_per_sm = np.diff(np.r_[boundaries, len(sm)])
    seq_ids = {int(sm[i]): w.new_sequence() for i in boundaries}
    seq = np.array([seq_ids[int(s)] for s in sm[boundaries]], np.uint64)

    arg_names = dict(ARG_NAMES)
    if block_args and b.end_noted():
        arg_names[END_ARG[0]] = END_ARG[1]
    # The first packet of each SM's sequence: interned names (those its blocks
    # use), defaults, clock.
    uses = np.zeros((int(sm.max()) + 1, int(b.name_iid.max()) + 1), bool)
    uses[b.sm, b.name_iid.astype(np.int64)] = True
    for i in boundaries:
        s = int(sm[i])
        pkt = pb.TracePacket(
            trusted_packet_sequence_id=seq_ids[s], sequence_flags=SEQ_CLEARED, first_packet_on_sequence=True
        )
        for iid in np.flatnonzero(uses[s]):
            pkt.interned_data.event_names.add(iid=int(iid), name=names[int(iid)])
        for arg, iid in arg_names.items():
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
    default_lane = np.array([sm_lane0_uuid[int(s)] for s in sm[boundaries]], np.uint64)
    lane_uuid = b.lane_uuid[order.slice]
    not_default = lane_uuid != np.repeat(default_lane, packets_per_sm)
    slices = Slices(b.lane_uuid, b.start, b.end, b.name_iid)
    if block_args:
        slices.int_arg(ARG_NAMES["block"], b.block_x)
        slices.int_arg(ARG_NAMES["block_y"], b.block_y, at_least=1)  # 0 in a 1-d grid
        slices.int_arg(ARG_NAMES["block_z"], b.block_z, at_least=1)
        slices.int_arg(ARG_NAMES["launch"], b.launch_id, at_least=0)  # -1: unresolved
        if b.end_quality is not None:
            slices.choice_arg(END_ARG[1], NOTE_CHOICES, b.end_quality)
        if b.end_unconfirmed is not None:
            slices.choice_arg(END_ARG[1], [UNCONFIRMED_NOTE], np.zeros(len(b.sm), np.uint8), b.end_unconfirmed)
    write_packets(
        w, order, slices, np.repeat(seq, packets_per_sm), timestamps=ts, tracks=np.where(not_default, lane_uuid, 0)
    )
    return len(t)
