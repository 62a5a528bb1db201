"""Clock snapshots laid out by row shape (perfetto_export/clock_snapshots.py) are the
packets protobuf writes, whether every row has one shape, a few, or more than a batch
lays out at once (the generic encoder); the clock relation keeps the tool's samples as
they are when they are in order, and sorts them as before when they are not."""

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from gpuobs.perfetto_export import clock_snapshots
from gpuobs.perfetto_export.clock import BOOTTIME, MONOTONIC, REALTIME, clock_relation, rows_where
from gpuobs.recording_file import schema

CLOCK_ID = 0x80001234


def _expected(columns: list) -> bytes:
    trace = pb.Trace()
    for row in zip(*(t.tolist() for _, t in columns)):
        snap = trace.packet.add().clock_snapshot
        for (clock_id, _), timestamp in zip(columns, row):
            snap.clocks.add(clock_id=clock_id, timestamp=timestamp)
    return trace.SerializeToString()


def _columns(kind: str, n: int = 500) -> list:
    rng = np.random.default_rng(len(kind))
    if kind == "one shape":  # a run's clocks: nanoseconds, steady for hours
        t = np.uint64(1_700_000_000_000_000_000) + np.arange(n, dtype=np.uint64) * np.uint64(1000)
        stamps = [t, t - np.uint64(10**15), t - np.uint64(10**12), t + np.uint64(5)]
    elif kind == "a few shapes":  # values across varint byte boundaries (2^7, 2^14, ... 2^63)
        edges = np.array([0, 1, 127, 128, 16383, 16384, 2**35 - 1, 2**35, 2**63 - 1, 2**64 - 1], np.uint64)
        stamps = [np.resize(np.roll(edges, k), n) for k in range(4)]
    else:  # more shapes than one batch lays out at once
        shifts = [rng.integers(0, 62, n).astype(np.uint64) for _ in range(4)]
        stamps = [rng.integers(0, 2**62, n, dtype=np.uint64) >> shift for shift in shifts]
    return list(zip((CLOCK_ID, BOOTTIME, MONOTONIC, REALTIME), stamps))


@pytest.mark.parametrize("kind", ["one shape", "a few shapes", "many shapes"])
def test_snapshot_packets_are_protobufs(kind, monkeypatch):
    columns = _columns(kind)
    lengths = sum(clock_snapshots.varint_lengths(t) << (4 * k) for k, (_, t) in enumerate(columns))
    shapes = len(np.unique(lengths))
    at_once = clock_snapshots.SHAPES_AT_ONCE
    assert {"one shape": shapes == 1, "a few shapes": 1 < shapes <= at_once, "many shapes": shapes > at_once}[kind]
    expected = _expected(columns)
    assert clock_snapshots.snapshot_packets(columns) == expected
    monkeypatch.setattr(clock_snapshots, "SHAPES_AT_ONCE", 0)  # every batch through the generic encoder
    assert clock_snapshots.snapshot_packets(columns) == expected
    monkeypatch.setattr(clock_snapshots, "SHAPES_AT_ONCE", 10**6)  # every batch laid out by shape
    assert clock_snapshots.snapshot_packets(columns) == expected
    assert clock_snapshots.snapshot_packets([(c, t[:0]) for c, t in columns]) == b""


def test_varint_lengths_at_each_boundary():
    values = np.array([0, 127, 128, 2**14 - 1, 2**14, 2**63 - 1, 2**63, 2**64 - 1], np.uint64)
    from gpuobs.perfetto_export.protowire import varint_bytes

    assert clock_snapshots.varint_lengths(values).tolist() == [len(varint_bytes(int(v))) for v in values.tolist()]


def _samples(n: int) -> np.ndarray:
    s = np.zeros(n, schema.dtype("gpuobs_clock_sample"))
    t = np.arange(n, dtype=np.uint64) * np.uint64(1000) + np.uint64(10**9)
    s["method"], s["device_ns"] = 1, t + np.uint64(500)
    for clock in ("monotonic", "boottime", "realtime"):
        s[f"{clock}_before"], s[f"{clock}_after"] = t, t + np.uint64(2 * (np.arange(n) % 7))
    return s


def test_the_relation_sorts_only_samples_out_of_order():
    s = _samples(50)
    in_order = clock_relation(s, 7, 0, "auto")
    assert in_order.samples is s  # nothing copied
    shuffled = s[np.random.default_rng(1).permutation(len(s))]
    again = clock_relation(shuffled, 7, 0, "auto")
    assert again.samples.tobytes() == s.tobytes()
    assert (again.offset_ns, again.uncertainty_ns, again.realtime_offset_ns) == (
        in_order.offset_ns,
        in_order.uncertainty_ns,
        in_order.realtime_offset_ns,
    )
    tied = s.copy()
    tied["device_ns"][10:13] = tied["device_ns"][10]  # equal times: argsort's order, as before
    assert clock_relation(tied, 7, 0, "auto").samples.tobytes() == tied[np.argsort(tied["device_ns"])].tobytes()
    unusable = s.copy()
    unusable["method"][::2] = 0
    assert clock_relation(unusable, 7, 0, "auto").samples.tobytes() == s[1::2].tobytes()


def test_rows_where_copies_only_a_selection():
    s = _samples(10)
    assert rows_where(s, np.ones(10, bool)) is s
    picked = rows_where(s, np.arange(10) % 3 == 0)
    assert picked.tobytes() == s[::3].tobytes() and len(rows_where(s, np.zeros(10, bool))) == 0
