"""native_encoder.c's one-pass encoders (*_grown: a malloc'd buffer that grows as
packets are written) against the two-pass ones they replace (measure, then write):
the same bytes, whatever the buffer starts at."""

import gc
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.host_traces.kineto import load_kineto
from gpuobs.perfetto_export import native_encoder
from gpuobs.perfetto_export.export import export
from gpuobs.perfetto_export.slice_encoder import Slices, packet_order, write_packets
from gpuobs.perfetto_export.trace_writer import NumberedTexts, Texts, TraceWriter

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
pytestmark = pytest.mark.skipif(native_encoder.encoder() is None, reason="no C compiler here")


def _two_pass(encode, packets) -> bytes:
    """What the replaced wrapper wrote: measure, then write into an array of that size."""
    lib, ffi = native_encoder.encoder(), native_encoder._FFI
    old = lib.gpuobs_encode_slices if encode == lib.gpuobs_encode_slices_grown else lib.gpuobs_encode_track_descriptors
    out = np.empty(old(ffi.NULL, packets), np.uint8)
    assert old(ffi.cast("uint8_t*", out.ctypes.data), packets) == len(out)
    return out.tobytes()


@pytest.fixture
def checked(monkeypatch):
    """Every _grown call checked against the two-pass bytes, from buffers of 0, 1, 7
    bytes (grown many times) and one past the size; the kinds of encoder called."""
    original, seen = native_encoder._grown, []

    def spy(encode, packets, capacity):
        out = original(encode, packets, capacity)
        want = _two_pass(encode, packets)
        assert out.tobytes() == want
        for start in (0, 1, 7, len(want) + 100):
            assert original(encode, packets, start).tobytes() == want
        seen.append(encode == native_encoder.encoder().gpuobs_encode_slices_grown)
        return out

    monkeypatch.setattr(native_encoder, "_grown", spy)
    return seen


def test_slices_with_args_and_flows_as_two_passes(checked):
    rng = np.random.default_rng(3)
    n = 300
    start = rng.integers(0, 10**12, n).astype(np.uint64)
    end = start + rng.integers(0, 10**6, n).astype(np.uint64)
    s = Slices(rng.integers(1, 1 << 40, n).astype(np.uint64), start, end, np.arange(1, n + 1, dtype=np.uint64))
    s.int_arg(3, rng.integers(-(1 << 62), 1 << 62, n), present=rng.random(n) < 0.7)
    s.choice_arg(4, [b"", b"kernel", "na\u00efve \0 text".encode()], rng.integers(0, 3, n))
    s.bool_arg(5, present=rng.random(n) < 0.5)
    s.flows_out(rng.integers(1, 1 << 63, (n, 2)).astype(np.uint64), rng.integers(0, 3, n))
    w = TraceWriter()
    write_packets(w, packet_order(start, end), s, w.new_sequence(), clock_id=6)  # write_slices walks in C itself
    assert True in checked


def test_track_descriptors_with_forms_and_merge_keys_as_two_passes(checked):
    rng = np.random.default_rng(5)
    n = 200
    pool = Texts.of(["", "python3 (pid 7)", "n\u00e4me\0x", "thread 12"] * (n // 4))
    affixes = (("stream ", ""), ("NVTX (thread ", ")"))
    names = NumberedTexts(pool, rng.integers(0, 3, n).astype(np.uint8), rng.integers(0, 1 << 64, n, np.uint64), affixes)
    keys = NumberedTexts(None, np.ones(n, np.uint8), rng.integers(0, 1 << 20, n, np.uint64), (("9-", ""),))
    merged = rng.random(n) < 0.6
    w = TraceWriter()
    w.track_batch(names, rng.integers(1, 1 << 30, n), rng.integers(0, 1 << 40, n), keys, merged=merged)
    w.track_batch(pool, None, None, None)
    assert checked.count(False) == 2


def test_a_host_trace_export_as_two_passes(checked, tmp_path):
    rec = gpuobs.load(DATA / "side_by_side_api_trace.gpuobs")
    export([rec], tmp_path / "t.pftrace", hosts=[load_kineto(DATA / "side_by_side_profiler.json")])
    assert True in checked  # the slices; its lane tracks come from LaneTrackPass (test_lane_track_pass.py)


def test_the_bytes_outlive_every_other_reference():
    """The array keeps the malloc'd buffer: still the bytes after a collection and
    other allocations."""
    w = TraceWriter()
    w.track_batch(Texts.of([f"track {i}" for i in range(5000)]))
    chunk = w._chunks[-1]
    want = bytes(chunk)
    del w
    gc.collect()
    _ = [np.ones(1 << 16) for _ in range(64)]
    assert bytes(chunk) == want and want.count(b"track 4999") == 1


def test_numbers_are_written_as_python_writes_them_at_every_power():
    """native_encoder.c's digit count (bit length, one compare) and its digits two at a
    time, through numbered: every power of ten and of two, one either side, 0, 2^64 - 1."""
    values = {0, 2**64 - 1, 2**64 - 2}
    for k in range(20):
        values |= {10**k - 1, 10**k, 10**k + 1}
    for k in range(64):
        values |= {2**k - 1, 2**k, 2**k + 1}
    values = sorted(v for v in values if 0 <= v < 2**64)
    chars, starts, lengths = native_encoder.numbered(b"n", np.array(values, np.uint64), b"!")
    got = [chars[a : a + n].tobytes().decode() for a, n in zip(starts.tolist(), lengths.tolist())]
    assert got == [f"n{v}!" for v in values]
