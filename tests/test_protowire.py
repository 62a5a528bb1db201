"""The bulk encoder must produce exactly what the protobuf library would."""
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
