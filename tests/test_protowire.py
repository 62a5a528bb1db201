"""The bulk encoder must produce exactly what the protobuf library would."""

import re
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from gpuobs.perfetto_export.protowire import Rows, varint_matrix


def test_varints_match_protobuf():
    values = np.array([0, 1, 127, 128, 300, 2**32, 2**63 - 1, 2**64 - 1], np.uint64)
    matrix, lengths = varint_matrix(values)
    for v, row, n in zip(values, matrix, lengths):
        pkt = pb.TracePacket(timestamp=int(v))
        assert pkt.SerializeToString() == b"\x40" + bytes(row[:n])


def test_optional_fields_and_nested_messages_decode_exactly():
    n = 7
    rng = np.random.default_rng(1)
    ts = rng.integers(0, 2**40, n).astype(np.uint64)
    has_name = rng.random(n) < 0.5
    has_ann = rng.random(n) < 0.5
    values = rng.integers(-(2**40), 2**40, n)
    ann = Rows(n).varint_field(1, 3).sint_as_varint_field(4, values)
    te = Rows(n).varint_field(9, 1).varint_field(10, np.arange(n) + 200, present=has_name)
    te.message_field(4, ann, present=has_ann)
    pk = Rows(n).varint_field(8, ts).message_field(11, te).varint_field(10, 5)
    trace = pb.Trace()
    trace.ParseFromString(pk.as_field(1).tobytes())
    assert len(trace.packet) == n
    for i, p in enumerate(trace.packet):
        expected = pb.TracePacket(timestamp=int(ts[i]), trusted_packet_sequence_id=5)
        expected.track_event.type = 1
        if has_name[i]:
            expected.track_event.name_iid = 200 + i
        if has_ann[i]:
            expected.track_event.debug_annotations.add(name_iid=3, int_value=int(values[i]))
        assert p == expected


# Every field number the bulk encoders write, and where the Perfetto protos define it.
FIELDS = {
    "TRACE_PACKET": (pb.Trace, "packet"),
    "PACKET_TIMESTAMP": (pb.TracePacket, "timestamp"),
    "PACKET_TIMESTAMP_CLOCK_ID": (pb.TracePacket, "timestamp_clock_id"),
    "PACKET_TRACK_EVENT": (pb.TracePacket, "track_event"),
    "PACKET_SEQUENCE_ID": (pb.TracePacket, "trusted_packet_sequence_id"),
    "PACKET_SEQUENCE_FLAGS": (pb.TracePacket, "sequence_flags"),
    "PACKET_CLOCK_SNAPSHOT": (pb.TracePacket, "clock_snapshot"),
    "CLOCK_SNAPSHOT_CLOCKS": (pb.ClockSnapshot, "clocks"),
    "CLOCK_ID": (pb.ClockSnapshot.Clock, "clock_id"),
    "CLOCK_TIMESTAMP": (pb.ClockSnapshot.Clock, "timestamp"),
    "TRACK_EVENT_TYPE": (pb.TrackEvent, "type"),
    "TRACK_EVENT_TRACK_UUID": (pb.TrackEvent, "track_uuid"),
    "TRACK_EVENT_NAME_IID": (pb.TrackEvent, "name_iid"),
    "TRACK_EVENT_DEBUG_ANNOTATIONS": (pb.TrackEvent, "debug_annotations"),
    "TRACK_EVENT_FLOW_IDS": (pb.TrackEvent, "flow_ids"),
    "TRACK_EVENT_TERMINATING_FLOW_IDS": (pb.TrackEvent, "terminating_flow_ids"),
    "ANNOTATION_NAME_IID": (pb.DebugAnnotation, "name_iid"),
    "ANNOTATION_BOOL_VALUE": (pb.DebugAnnotation, "bool_value"),
    "ANNOTATION_INT_VALUE": (pb.DebugAnnotation, "int_value"),
    "ANNOTATION_STRING_VALUE": (pb.DebugAnnotation, "string_value"),
}
WIRE_TYPES = {"VARINT": 0, "FIXED64": 1, "LEN": 2}


def test_field_numbers_are_the_perfetto_protos():
    from gpuobs.perfetto_export import protowire

    named = {k for k, v in vars(protowire).items() if k.isupper() and isinstance(v, int)}
    assert named == set(FIELDS) | set(WIRE_TYPES)
    for name, (message, field) in FIELDS.items():
        assert getattr(protowire, name) == message.DESCRIPTOR.fields_by_name[field].number, name
    for name, wire in WIRE_TYPES.items():
        assert getattr(protowire, name) == wire


def test_the_c_encoder_uses_the_same_numbers():
    from gpuobs.perfetto_export import native_encoder, protowire, slice_encoder

    source = Path(native_encoder.SOURCE).read_text()
    enums = re.findall(r"enum\s*\{([^}]*)\}", source)
    constants = {k: int(v) for body in enums for k, v in re.findall(r"(\w+)\s*=\s*(\d+)", body)}
    expected = {name: getattr(protowire, name) for name in list(FIELDS) + list(WIRE_TYPES)}
    expected |= {
        "TYPE_SLICE_BEGIN": pb.TrackEvent.TYPE_SLICE_BEGIN,
        "TYPE_SLICE_END": pb.TrackEvent.TYPE_SLICE_END,
        "ARG_INT": slice_encoder.INT,
        "ARG_BOOL": slice_encoder.BOOL,
        "ARG_STRING": slice_encoder.STRING,
        "MAX_ARGS": slice_encoder.MAX_ARGS,
    }
    assert constants == {k: expected[k] for k in constants}
    # the C side is handed which flow field to write; clock snapshots are numpy-encoded only
    clock_fields = {"PACKET_CLOCK_SNAPSHOT", "CLOCK_SNAPSHOT_CLOCKS", "CLOCK_ID", "CLOCK_TIMESTAMP"}
    assert set(FIELDS) - set(constants) == {"TRACK_EVENT_FLOW_IDS", "TRACK_EVENT_TERMINATING_FLOW_IDS"} | clock_fields


def test_clock_snapshots_in_bulk_are_the_protobuf_messages():
    """Clock samples are encoded in bulk (a million took 1.9 GB as messages): the same
    packets as one ClockSnapshot message per sample, across batches, up to 2^62 ns."""
    import numpy as np

    from gpuobs.perfetto_export.clock import BOOTTIME, MONOTONIC, REALTIME, ClockRelation
    from gpuobs.recording_file import schema

    rng = np.random.default_rng(5)
    s = np.zeros(7, schema.dtype("gpuobs_clock_sample"))
    s["device_ns"] = rng.integers(1, 2**62, 7, dtype=np.uint64)
    for clock in ("boottime", "monotonic", "realtime"):
        s[f"{clock}_before"] = rng.integers(0, 2**61, 7, dtype=np.uint64)
        s[f"{clock}_after"] = s[f"{clock}_before"] + rng.integers(0, 2**61, 7, dtype=np.uint64)
    relation = ClockRelation(0x80001234, s)
    expected = pb.Trace()
    for row in s:
        snap = expected.packet.add().clock_snapshot
        snap.clocks.add(clock_id=relation.clock_id, timestamp=int(row["device_ns"]))
        for clock_id, clock in ((BOOTTIME, "boottime"), (MONOTONIC, "monotonic"), (REALTIME, "realtime")):
            mid = (int(row[f"{clock}_before"]) + int(row[f"{clock}_after"])) // 2
            snap.clocks.add(clock_id=clock_id, timestamp=mid)
    assert b"".join(relation.snapshot_packets(batch=3)) == expected.SerializeToString()
