"""Protobuf wire encoding in bulk with numpy: millions of small messages of one
shape (the same fields, per-row values) are laid out column by column, so no
Python code runs per event. Field numbers are the named constants below, from
the Perfetto protos (tests/test_protowire.py checks them against perfetto_trace_pb2).

    rows = Rows(n)
    rows.varint_field(PACKET_TIMESTAMP, timestamps)   # optional fields take present=mask
    rows.message_field(PACKET_TRACK_EVENT, track_event_rows)
    buf = rows.as_field(TRACE_PACKET).tobytes()        # n `Trace.packet` entries, back to back
"""

from __future__ import annotations

import numpy as np

# Wire types.
VARINT, FIXED64, LEN = 0, 1, 2

# perfetto.protos.Trace
TRACE_PACKET = 1  # repeated TracePacket packet
# perfetto.protos.TracePacket
PACKET_TIMESTAMP = 8  # uint64 timestamp
PACKET_TIMESTAMP_CLOCK_ID = 58  # uint32 timestamp_clock_id
PACKET_TRACK_EVENT = 11  # TrackEvent track_event
PACKET_SEQUENCE_ID = 10  # uint32 trusted_packet_sequence_id
PACKET_SEQUENCE_FLAGS = 13  # uint32 sequence_flags
PACKET_CLOCK_SNAPSHOT = 6  # ClockSnapshot clock_snapshot
# perfetto.protos.ClockSnapshot
CLOCK_SNAPSHOT_CLOCKS = 1  # repeated Clock clocks
# perfetto.protos.ClockSnapshot.Clock
CLOCK_ID = 1  # uint32 clock_id
CLOCK_TIMESTAMP = 2  # uint64 timestamp
# perfetto.protos.TrackEvent
TRACK_EVENT_TYPE = 9  # Type type
TRACK_EVENT_TRACK_UUID = 11  # uint64 track_uuid
TRACK_EVENT_NAME_IID = 10  # uint64 name_iid
TRACK_EVENT_DEBUG_ANNOTATIONS = 4  # repeated DebugAnnotation debug_annotations
TRACK_EVENT_FLOW_IDS = 47  # repeated fixed64 flow_ids
TRACK_EVENT_TERMINATING_FLOW_IDS = 48  # repeated fixed64 terminating_flow_ids
# perfetto.protos.DebugAnnotation
ANNOTATION_NAME_IID = 1  # uint64 name_iid
ANNOTATION_BOOL_VALUE = 2  # bool bool_value
ANNOTATION_INT_VALUE = 4  # int64 int_value
ANNOTATION_STRING_VALUE = 6  # string string_value


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint_bytes((field << 3) | wire)


def varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's varint bytes (rows of a (n, w) matrix) and its length."""
    v = np.asarray(values, dtype=np.uint64).copy()
    n = len(v)
    cols, lengths = [], np.ones(n, np.int64)
    for _ in range(10):
        low = (v & np.uint64(0x7F)).astype(np.uint8)
        v >>= np.uint64(7)
        more = v != 0
        cols.append(low | (more.astype(np.uint8) << 7))
        if not more.any():
            break
        lengths += more
    return np.stack(cols, axis=1) if cols else np.zeros((n, 1), np.uint8), lengths


class Rows:
    """n messages of one shape, built field by field."""

    def __init__(self, n: int):
        self.n = n
        self._parts: list[tuple[str, object, np.ndarray]] = []

    def _bytes_part(self, data: bytes, present):
        lengths = np.full(self.n, len(data), np.int64)
        if present is not None:
            lengths = np.where(present, lengths, 0)
        self._parts.append(("const", np.frombuffer(data, np.uint8), lengths))

    def raw(self, data: bytes, present=None) -> "Rows":
        self._bytes_part(data, present)
        return self

    def varint_field(self, field: int, values, present=None) -> "Rows":
        values = np.asarray(values, np.uint64)
        t = np.frombuffer(tag(field, VARINT), np.uint8)
        if values.ndim == 0:  # the same value in every row: a constant
            return self.raw(t.tobytes() + varint_bytes(int(values)), present)
        matrix, lengths = varint_matrix(values)
        # the tag goes in front of each value, as one part
        tagged = np.empty((self.n, len(t) + matrix.shape[1]), np.uint8)
        tagged[:, : len(t)] = t
        tagged[:, len(t) :] = matrix
        lengths = lengths + len(t)
        if present is not None:
            lengths = np.where(present, lengths, 0)
        self._parts.append(("matrix", tagged, lengths))
        return self

    def sint_as_varint_field(self, field: int, values, present=None) -> "Rows":
        """An int64 field (two's complement varint)."""
        return self.varint_field(field, np.asarray(values, np.int64).astype(np.uint64), present)

    def message_field(self, field: int, inner: "Rows", present=None) -> "Rows":
        inner_len = inner.lengths()
        self._bytes_part(tag(field, LEN), present)
        matrix, lengths = varint_matrix(inner_len)
        if present is not None:
            lengths = np.where(present, lengths, 0)
            inner_len = np.where(present, inner_len, 0)
        self._parts.append(("matrix", matrix, lengths))
        self._parts.append(("rows", inner, inner_len))
        return self

    def bytes_field(self, field: int, chars: np.ndarray, starts, lengths, present=None) -> "Rows":
        """A length-delimited field: row i holds chars[starts[i] : starts[i] + lengths[i]]
        (`chars` holds every value once, e.g. b"".join(values), as uint8)."""
        lengths = np.asarray(lengths, np.int64)
        if present is not None:
            lengths = np.where(present, lengths, 0)
        self._bytes_part(tag(field, LEN), present)
        matrix, size_lengths = varint_matrix(lengths)
        if present is not None:
            size_lengths = np.where(present, size_lengths, 0)
        self._parts.append(("matrix", matrix, size_lengths))
        self._parts.append(("gather", (np.asarray(chars, np.uint8), np.asarray(starts, np.int64)), lengths))
        return self

    def fixed64_repeated_field(self, field: int, values: np.ndarray, counts: np.ndarray) -> "Rows":
        """A repeated fixed64 field (e.g. TrackEvent.flow_ids): row i holds
        values[i, :counts[i]]; `values` is an (n, k) array padded past each count."""
        values = np.asarray(values, np.uint64).reshape(self.n, -1)
        counts = np.asarray(counts, np.int64)
        t = np.frombuffer(tag(field, FIXED64), np.uint8)
        item = len(t) + 8
        k = values.shape[1]
        m = np.zeros((self.n, max(k, 1) * item), np.uint8)
        for j in range(k):
            m[:, j * item : j * item + len(t)] = t
            m[:, j * item + len(t) : (j + 1) * item] = values[:, j : j + 1].astype("<u8").view(np.uint8)
        self._parts.append(("matrix", m, np.minimum(counts, k) * item))
        return self

    def lengths(self) -> np.ndarray:
        total = np.zeros(self.n, np.int64)
        for _, _, lengths in self._parts:
            total += lengths
        return total

    def as_field(self, field: int) -> "Rows":
        """These rows as field `field` of n outer messages (e.g. TRACE_PACKET)."""
        return Rows(self.n).message_field(field, self)

    def write_into(self, out: np.ndarray, offsets: np.ndarray, active: np.ndarray | None = None) -> None:
        """Writes every row at its offset; rows where `active` is False write nothing."""
        pos = offsets.copy()
        for kind, data, lengths in self._parts:
            if active is not None:
                lengths = np.where(active, lengths, 0)
            if kind == "rows":
                data.write_into(out, pos, lengths > 0 if active is None else active & (lengths > 0))
            elif kind == "const":
                _scatter_const(out, pos, data, lengths)
            elif kind == "gather":
                _scatter_gather(out, pos, *data, lengths)
            else:
                _scatter_matrix(out, pos, data, lengths)
            pos += lengths

    def tobytes(self) -> bytes:
        lengths = self.lengths()
        offsets = np.zeros(self.n, np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        out = np.zeros(int(lengths.sum()), np.uint8)
        self.write_into(out, offsets)
        return out.tobytes()


def _byte_positions(pos: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Output position of every byte of every row, rows in order (no n-by-width index matrix)."""
    total = int(lengths.sum())
    starts = np.repeat(pos - np.cumsum(lengths) + lengths, lengths)
    return starts + np.arange(total)


def _scatter_const(out, pos, data, lengths) -> None:
    if len(data) == 1:
        out[pos[lengths > 0]] = data[0]
        return
    present = lengths > 0
    for k in range(len(data)):
        out[pos[present] + k] = data[k]


def _scatter_gather(out, pos, chars, starts, lengths) -> None:
    out[_byte_positions(pos, lengths)] = chars[_byte_positions(starts, lengths)]


def _scatter_matrix(out, pos, data, lengths) -> None:
    width = data.shape[1]
    if width == 1:
        present = lengths > 0
        out[pos[present]] = data[present, 0]
        return
    mask = np.arange(width)[None, :] < lengths[:, None]
    out[_byte_positions(pos, lengths)] = data[mask]
