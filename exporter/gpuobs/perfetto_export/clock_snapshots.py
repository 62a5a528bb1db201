"""ClockSnapshot packets in bulk, laid out by row shape: every packet has the same
fields (a few clocks, each an id and a timestamp), so once each timestamp's varint
length is known a packet is a fixed template with the timestamps' bytes in known
columns. Rows of one shape (as a rule all of them: nanosecond clocks keep their
varint length for hours) fill one matrix column by column; the generic Rows encoder
(protowire.py) builds each field of each row and costs about three times as much.
A batch of many shapes (values no clock gives, but a file may hold) goes to Rows."""

from __future__ import annotations

import numpy as np

from .protowire import (
    CLOCK_ID,
    CLOCK_SNAPSHOT_CLOCKS,
    CLOCK_TIMESTAMP,
    LEN,
    PACKET_CLOCK_SNAPSHOT,
    TRACE_PACKET,
    VARINT,
    Rows,
    tag,
    varint_bytes,
)

SHAPES_AT_ONCE = 16  # distinct layouts in a batch beyond which the generic encoder is used
VARINT_LIMITS = [np.uint64(1 << (7 * i)) for i in range(1, 10)]  # values from these take one more byte


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's varint (1 to 10)."""
    lengths = np.ones(len(values), np.int64)
    for limit in VARINT_LIMITS:
        lengths += values >= limit
    return lengths


def snapshot_packets(clocks: list) -> bytes:
    """`Trace.packet` entries, one ClockSnapshot per row, back to back: `clocks` is
    [(clock id, timestamps)], the same number of timestamps each."""
    ids = [int(clock_id) for clock_id, _ in clocks]
    stamps = [np.asarray(t, np.uint64) for _, t in clocks]
    n = len(stamps[0])
    if n == 0:
        return b""
    lengths = [varint_lengths(t) for t in stamps]
    shape = np.zeros(n, np.int64)
    for k, lk in enumerate(lengths):
        shape += lk << (4 * k)  # each length below 16: one key per combination
    shapes = np.unique(shape)
    if len(shapes) > SHAPES_AT_ONCE:
        return _generic(ids, stamps)
    layouts = [_layout(ids, [int(s) >> (4 * k) & 15 for k in range(len(ids))]) for s in shapes.tolist()]
    if len(shapes) == 1:  # every row alike: the matrix is the packets
        return _fill(layouts[0], stamps).tobytes()
    widest = max(len(template) for template, _ in layouts)
    rows = np.zeros((n, widest), np.uint8)
    width = np.empty(n, np.int64)
    for s, layout in zip(shapes.tolist(), layouts):
        members = np.flatnonzero(shape == s)
        rows[members, : len(layout[0])] = _fill(layout, [t[members] for t in stamps])
        width[members] = len(layout[0])
    return rows[np.arange(widest) < width[:, None]].tobytes()  # each row's bytes, rows in order


def _fill(layout: tuple, stamps: list) -> np.ndarray:
    """One packet per row of `stamps` (all of the layout's shape), as a matrix."""
    template, columns = layout
    block = np.empty((len(stamps[0]), len(template)), np.uint8)
    block[:] = template
    for (first, count), t in zip(columns, stamps):
        _varint_columns(block, first, count, t)
    return block


def _layout(ids: list, stamp_lengths: list) -> tuple:
    """(template row, [(first column, bytes) of each timestamp]) of packets whose
    timestamps take `stamp_lengths` bytes: every length in it is known."""
    clocks, columns, at = [], [], 0
    for clock_id, length in zip(ids, stamp_lengths):
        head = tag(CLOCK_ID, VARINT) + varint_bytes(clock_id) + tag(CLOCK_TIMESTAMP, VARINT)
        clock = head + bytes(length)  # the timestamp's bytes filled per row
        prefix = tag(CLOCK_SNAPSHOT_CLOCKS, LEN) + varint_bytes(len(clock))
        columns.append((at + len(prefix) + len(head), length))
        clocks.append(prefix + clock)
        at += len(prefix) + len(clock)
    snapshot = b"".join(clocks)
    body = tag(PACKET_CLOCK_SNAPSHOT, LEN) + varint_bytes(len(snapshot)) + snapshot
    packet = tag(TRACE_PACKET, LEN) + varint_bytes(len(body)) + body
    offset = len(packet) - len(snapshot)
    return np.frombuffer(packet, np.uint8), [(offset + first, length) for first, length in columns]


def _varint_columns(block: np.ndarray, first: int, count: int, values: np.ndarray) -> None:
    """Each value's varint of exactly `count` bytes into columns first..first+count-1."""
    low7 = np.uint64(0x7F)
    for i in range(count):
        byte = ((values >> np.uint64(7 * i)) & low7).astype(np.uint8)
        block[:, first + i] = (byte | np.uint8(0x80)) if i < count - 1 else byte  # more bytes follow


def _generic(ids: list, stamps: list) -> bytes:
    n = len(stamps[0])
    snap = Rows(n)
    for clock_id, t in zip(ids, stamps):
        clock = Rows(n).varint_field(CLOCK_ID, clock_id).varint_field(CLOCK_TIMESTAMP, t)
        snap.message_field(CLOCK_SNAPSHOT_CLOCKS, clock)
    return Rows(n).message_field(PACKET_CLOCK_SNAPSHOT, snap).as_field(TRACE_PACKET).tobytes()
