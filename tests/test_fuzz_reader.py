"""Damaged recordings: the reader fails only with its documented errors, and
salvage never fails at all (hypothesis; a longer run: benchmarks/fuzz_reader.py)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuobs
from gpuobs.errors import RecordingError
from gpuobs.recording_file import synthetic


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "r.gpuobs"
    synthetic.write_block_trace_recording(path, n_launches=3, blocks_per_launch=50, sm_count=8)
    return path.read_bytes()


def damage(data: bytes, flips, cut) -> bytes:
    buf = bytearray(data)
    for pos, bits in flips:
        buf[pos % len(buf)] ^= bits or 1
    return bytes(buf[: max(0, len(buf) - cut)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), max_size=4), cut=st.integers(0, 3000))
def test_damaged_files_fail_cleanly_and_salvage(tmp_path, original, flips, cut):
    path = tmp_path / "d.gpuobs"
    path.write_bytes(damage(original, flips, cut))
    try:
        rec = gpuobs.load(path)
        _ = rec.events, rec.launches, rec.totals  # a clean load must be usable
    except RecordingError as exc:
        assert str(path) in str(exc) and "at byte" in str(exc)
    try:
        rec = gpuobs.load(path, salvage=True)
    except RecordingError as exc:  # only a damaged file header cannot be salvaged
        assert exc.offset < 56
        return
    assert len(rec.events) <= 150
    if rec.damage is not None:
        assert 0 < rec.damage.offset <= len(path.read_bytes())
