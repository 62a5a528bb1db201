"""CRC-valid recordings whose values no tool writes fail at load, naming the chunk,
the row and the field, instead of raising MemoryError or ValueError in an export;
salvage keeps what precedes them. Long runs load in time linear in their flushes."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.errors import CorruptChunk, RecordingError
from gpuobs.recording_file import recording_checks, schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

EXPORTER = Path(__file__).resolve().parents[1] / "exporter"


def write(path, events=None, launches=None, clocks=None, sm_count=8, device=True, flush=None, blocks=50, sampling=None):
    ev, ln = synthetic.block_trace_events(3, blocks, sm_count=sm_count)
    if events:
        events(ev)
    if launches:
        launches(ln)
    cs = synthetic._clock_samples(ev, 568_000)
    if clocks:
        clocks(cs)
    with RecordingWriter(path) as w:
        w.run(pid=1, mode=schema.Mode.BLOCK_TRACE)
        if device:
            w.device(sm_count=sm_count)
        for slot, (mangled, demangled) in enumerate(synthetic.FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.launches(ln)
        w.clock_samples(cs)
        w.flush(**(flush or dict(attempted=len(ev), recorded=len(ev), dropped=0)))
        if sampling:
            w.sampling(**sampling)
        w.events(ev)
        w.end()
    return path


def slot_out_of_range(ev):
    ev["function_slot"][5] = 2**32 - 1


def absurd_sm(ev):
    ev["sm_id"][7] = 65535


def deep_overlap(ev):
    ev["sm_id"] = ev["sm_id_end"] = 3  # every block on one SM, all open at once
    ev["time_start"] = int(ev["time_start"].min()) + np.arange(len(ev))
    ev["time_end"] = int(ev["time_start"].max()) + 1_000_000


def memory_at_end_of_time(ev):
    ev["kind"][0], ev["time_start"][0], ev["time_end"][0] = schema.EventKind.MEMORY, 2**64 - 1, 0


def inverted_bracket(cs):
    cs["monotonic_before"], cs["monotonic_after"] = cs["monotonic_after"].copy(), cs["monotonic_before"].copy()


def wrapping_grid(ln):
    ln["grid"][1] = (3, 2**32 - 1, 1)


CASES = {
    "function slot 2^32-1": (
        dict(events=slot_out_of_range),
        "EVENTS chunk: event 5: function_slot 4294967295 is not below 65,536",
    ),
    "SM id 65535": (dict(events=absurd_sm), "EVENTS chunk: event 7: sm_id 65535 is not below 16"),
    "SM id 65535, no DEVICE chunk": (dict(events=absurd_sm, device=False), "sm_id 65535 is not below 1,024"),
    "deep overlap on one SM": (dict(events=deep_overlap, blocks=400), "1,200 blocks are open at once on SM 3"),
    "a memory event at 2^64-1": (
        dict(events=memory_at_end_of_time),
        "EVENTS chunk: event 0: time_start 18446744073709551615 is not below",
    ),
    "inverted clock bracket": (
        dict(clocks=inverted_bracket),
        "CLOCK chunk: clock sample 0: monotonic_after 4999999422021 is before monotonic_before 4999999442021",
    ),
    "grid of 3 x (2^32-1)": (
        dict(launches=wrapping_grid),
        "LAUNCHES chunk: launch 1: grid 3x4294967295x1: gridDim.y 4294967295 is above CUDA's limit 65,535",
    ),
    "flush accounting": (
        dict(flush=dict(attempted=10, recorded=3, dropped=1)),
        "FLUSH chunk: attempted 10 is not recorded 3 + dropped 1",
    ),
    # info, stats and export divide by the period of a duty cycle the device kept
    "a device duty cycle with no period": (
        dict(sampling=dict(flags=schema.SamplingFlag.DUTY_ON_DEVICE, duty_on_ns=0, duty_period_ns=0)),
        "SAMPLING chunk: a duty cycle on the device's clock of 0 ns of every 0 ns",
    ),
    "a device duty cycle not of powers of two": (
        dict(sampling=dict(flags=schema.SamplingFlag.DUTY_ON_DEVICE, duty_on_ns=3 << 20, duty_period_ns=1 << 26)),
        "SAMPLING chunk: a duty cycle on the device's clock of 3145728 ns of every 67108864 ns",
    ),
    "reserved flush_seq": (
        dict(flush=dict(flush_seq=0xFFFFFFFF, attempted=0, recorded=0, dropped=0)),
        "FLUSH chunk: flush_seq 0xffffffff is reserved",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_values_are_named_at_load(tmp_path, case):
    kwargs, message = CASES[case]
    path = write(tmp_path / "h.gpuobs", **kwargs)
    with pytest.raises(CorruptChunk) as exc:
        gpuobs.load(path)
    assert message in str(exc.value) and str(path) in str(exc.value)


def test_deep_overlap_counts_blocks_open_at_once_not_blocks_per_sm(tmp_path):
    def one_sm_in_turn(ev):  # 150 blocks one after another on one SM: deep history, no overlap
        ev["sm_id"] = ev["sm_id_end"] = 0
        ev["time_start"] = int(ev["time_start"].min()) + np.arange(len(ev)) * 10
        ev["time_end"] = ev["time_start"] + 10  # touching ends do not overlap

    rec = gpuobs.load(write(tmp_path / "ok.gpuobs", events=one_sm_in_turn))
    depth, _, _ = recording_checks.deepest_block_overlap(rec.event_chunks, rec.event_chunk_devices)
    assert depth == 1


def test_salvage_keeps_what_precedes_a_bad_value(tmp_path):
    path = write(tmp_path / "h.gpuobs", events=slot_out_of_range)
    with pytest.raises(CorruptChunk) as exc:
        gpuobs.load(path)
    rec = gpuobs.load(path, salvage=True)
    assert rec.damage.offset == exc.value.offset and "function_slot" in rec.damage.reason
    assert rec.damage.bytes_lost == path.stat().st_size - exc.value.offset
    assert len(rec.launches) == 150 // 50 and len(rec.flushes) == 1 and len(rec.events) == 0 and not rec.complete


def test_export_of_a_hostile_recording_is_one_clear_line(tmp_path):
    """As a user runs it: no MemoryError, no traceback, exit status 2."""
    path = write(tmp_path / "h.gpuobs", events=slot_out_of_range)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuobs", "export", str(path), "-o", str(tmp_path / "t.pftrace")],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(EXPORTER)),
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "function_slot 4294967295" in " ".join(proc.stderr.split())


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_recording_must_be_a_regular_file(tmp_path, kind):
    path = {"folder": tmp_path, "device": Path("/dev/zero")}.get(kind)
    if kind == "fifo":
        path = tmp_path / "pipe.gpuobs"
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    words = {"folder": "a folder", "fifo": "a FIFO (named pipe)", "device": "a character device"}[kind]
    with pytest.raises(RecordingError, match=re.escape(f"cannot open: {words}, not a regular file")):
        gpuobs.load(path)


def test_a_long_run_loads_in_time_linear_in_its_flushes(tmp_path):
    """12,000 flushes (the soak's count): every launch assigned to its FLUSH once.
    Before, each FLUSH rescanned every earlier LAUNCHES part (63 s at 8,000 flushes);
    the bound here is ten times what it takes now (benchmarks/load_scale.py)."""
    path = synthetic.write_many_flush_recording(tmp_path / "long.gpuobs", 12_000)
    began = time.perf_counter()
    rec = gpuobs.load(path)
    took = time.perf_counter() - began
    assert len(rec.flushes) == 12_000 and len(rec.launches) == 24_000
    assert (rec.launch_flushes == np.arange(24_000) // 2).all()
    assert took < 20, f"loading 12,000 flushes took {took:.1f} s"


def test_overlap_depth_agrees_with_counting_open_blocks(monkeypatch):
    """Random blocks over chunks, devices and SMs (some flagged, some zero-length), read
    a few rows at a time: the sorted-key depth equals a direct count of open blocks."""
    monkeypatch.setattr(recording_checks, "SPAN_ROWS", 7)
    rng = np.random.default_rng(2)
    for _ in range(200):
        chunks, devices = [], []
        for _ in range(rng.integers(1, 4)):
            n = int(rng.integers(0, 40))
            ev = np.zeros(n, schema.EVENT_DTYPE)
            ev["kind"] = rng.integers(1, 3, n)
            ev["sm_id"] = rng.integers(0, 3, n)
            ev["time_start"] = rng.integers(0, 50, n) + 10**15 + (2**61 if rng.random() < 0.1 else 0)
            ev["time_end"] = ev["time_start"] + rng.integers(0, 20, n)
            ev["flags"] = (rng.random(n) < 0.1) * schema.BLOCK_END_UNCONFIRMED
            chunks.append(ev)
            devices.append(int(rng.integers(0, 2)))
        blocks = [(d, e) for d, c in zip(devices, chunks) for e in c if e["kind"] == schema.EventKind.BLOCK]
        spans = [
            (
                d,
                int(e["sm_id"]),
                int(e["time_start"]),
                int(e["time_start"]) if e["flags"] else max(int(e["time_end"]), int(e["time_start"])),
            )
            for d, e in blocks
        ]
        expected = max(
            (sum(1 for d2, sm2, s2, e2 in spans if (d2, sm2) == (d, sm) and s2 <= s < e2) for d, sm, s, _ in spans),
            default=0,
        )
        depth, chunk, row = recording_checks.deepest_block_overlap(chunks, devices)
        assert depth == expected
        if depth:
            assert chunks[chunk][row]["kind"] == schema.EventKind.BLOCK
