"""Collects TracePackets, as protobuf messages or bulk-encoded rows, into one
trace file; hands out track uuids and sequence ids."""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .protowire import Rows, tag, varint_bytes

TRACE_PACKET_FIELD = 1
SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


class TraceWriter:
    def __init__(self):
        self._chunks: list[bytes] = []
        self._next_uuid = 1
        self._next_seq = 1
        self.tracks = 0

    def new_sequence(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def packet(self, pkt: pb.TracePacket) -> None:
        data = pkt.SerializeToString()
        self._chunks.append(tag(TRACE_PACKET_FIELD, 2) + varint_bytes(len(data)) + data)

    def raw(self, encoded_packets: bytes) -> None:
        """Packets already encoded as Trace.packet entries."""
        self._chunks.append(encoded_packets)

    def rows(self, rows: Rows) -> None:
        if rows.n:
            self._chunks.append(rows.as_field(TRACE_PACKET_FIELD).tobytes())

    def track(
        self,
        name: str,
        parent: int | None = None,
        description: str | None = None,
        explicit_order: bool = False,
        rank: int | None = None,
        merge_key: str | None = None,
        counter_unit: str | None = None,
    ) -> int:
        uuid = self._next_uuid
        self._next_uuid += 1
        desc = pb.TrackDescriptor(uuid=uuid, name=name)
        if parent is not None:
            desc.parent_uuid = parent
        if description:
            desc.description = description
        if explicit_order:
            desc.child_ordering = pb.TrackDescriptor.EXPLICIT
        if rank is not None:
            desc.sibling_order_rank = rank
        if merge_key is not None:
            desc.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
            desc.sibling_merge_key = merge_key
        if counter_unit is not None:
            desc.counter.unit_name = counter_unit
        self.packet(pb.TracePacket(track_descriptor=desc))
        self.tracks += 1
        return uuid

    def size(self) -> int:
        return sum(len(c) for c in self._chunks)

    def save(self, target) -> int:
        """Writes the trace to a path or to an open binary file (gpuobs.outputs)."""
        if hasattr(target, "write"):
            for chunk in self._chunks:
                target.write(chunk)
            return self.size()
        with open(target, "wb") as fh:
            return self.save(fh)
