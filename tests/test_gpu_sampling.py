"""The sampler on a loop of CUDA graph replays that never synchronises (a server
queuing decode steps back to back): the tool's own thread turns the device's
sample gate by a duty cycle or a data budget, every block is counted, records are
kept only while the gate is open, and each flush's records, drops and sampled-out
blocks add up to what it counted."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import assert_windows_add_up, record

pytestmark = pytest.mark.gpu

REPLAYS = 4000
LOOP = f"""
import json, time, torch
x = torch.randn(1 << 22, device="cuda")
graph = torch.cuda.CUDAGraph()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
    x.mul_(1.0001)
    x.add_(1.0)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range({REPLAYS}):
    graph.replay()
torch.cuda.synchronize()
print(json.dumps({{"replays": {REPLAYS}, "s": time.perf_counter() - t0}}))
"""

DEBUG_ENV = dict(os.environ, GPUOBS_DEBUG="1")


def assert_sampling_adds_up(rec):
    """Every flush: recorded + dropped == attempted, and (block modes) attempted +
    sampled out == the blocks its launches counted (with those of no listed launch)."""
    assert_windows_add_up(rec)
    # Thousands of replays' launch rows and counts: the tool's tables went packed.
    assert rec.packed_chunks > 0, "LAUNCHES and FLUSH chunks written packed by default"
    assert len(rec.sampling) == len(rec.flushes), "a SAMPLING chunk after every FLUSH"
    counted_by_flush = analysis.counted_by_flush(rec)  # a counter slot that launches shared, once
    for f, s in zip(rec.flushes, rec.sampling):
        key = (int(f["device_index"]), int(f["flush_seq"]))
        assert (int(s["device_index"]), int(s["flush_seq"])) == key
        counted = counted_by_flush.get(key, 0) + int(f["unattributed"])
        assert int(f["attempted"]) + int(s["sampled_out"]) == counted, (
            dict(zip(f.dtype.names, f)),
            int(s["sampled_out"]),
        )


def open_stretches(rec, gap_ns):
    """The block records' starts, in stretches separated by more than gap_ns."""
    starts = np.sort(rec.events["time_start"][rec.events["kind"] == schema.EventKind.BLOCK].astype(np.int64))
    return 1 + int((np.diff(starts) > gap_ns).sum()) if len(starts) else 0


@pytest.mark.parametrize("mode", ["block_trace", "block_starts"])
def test_duty_cycle_records_only_its_windows_and_counts_every_block(tmp_path, mode):
    proc, rec = record(
        tmp_path, mode, [sys.executable, "-c", LOOP], "--duty", "10ms/50ms", "--budget", "0", env=DEBUG_ENV
    )
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec.complete and rec.damage is None
    assert_sampling_adds_up(rec)
    s = analysis.summary(rec)
    # Every replay listed and counted whole: the gate leaves counting alone.
    assert s["counts_unattributed"] == 0 and s["events_unattributed"] == 0, s
    table = analysis.launch_table(rec)
    assert (table.counted == table.grid_blocks * table.counted_shared).all()
    nodes = (rec.launches["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    assert len(np.unique(rec.launches["graph_launch_id"][nodes])) >= ran["replays"]
    sampled_out = rec.totals["sampled_out"]
    assert sampled_out > 0 and rec.totals["recorded"] > 0, rec.totals
    # 10 ms of every 50: records in stretches ~40 ms apart, about a fifth of the blocks
    # (wide bounds: a turn lands when the sampler's copy does, beside the program's kernels).
    share = rec.totals["recorded"] / (rec.totals["attempted"] + sampled_out)
    assert 0.05 < share < 0.5, share
    assert 2 <= open_stretches(rec, 20_000_000) <= ran["s"] / 0.05 + 3
    d = rec.sampling[-1]
    assert (int(d["duty_on_ns"]), int(d["duty_period_ns"]), int(d["budget_bytes_per_s"])) == (10**7, 5 * 10**7, 0)
    assert int(rec.sampling["gate_turns"].sum()) >= 2


def test_budget_samples_instead_of_waiting(tmp_path):
    proc, rec = record(tmp_path, "block_trace", [sys.executable, "-c", LOOP], "--budget", "1", env=DEBUG_ENV)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec.complete and rec.damage is None
    assert_sampling_adds_up(rec)
    t = rec.totals
    assert t["sampled_out"] > 0, t
    table = analysis.launch_table(rec)
    assert (table.counted == table.grid_blocks * table.counted_shared).all()
    burst = int(rec.sampling["burst_bytes"][-1])
    assert int(rec.sampling["budget_bytes_per_s"][-1]) == 1_000_000 and burst == 60_000_000
    # What the rings took: the burst, a second's budget per second, and what a gate closing
    # late lets in (the sampler reads the claims every millisecond; 64 MB is generous).
    taken = (t["attempted"] + t["warp_arrivals"] // 2) * 64
    assert taken <= burst + 1_000_000 * (ran["s"] + 2) + 64_000_000, (taken, ran)
    # The file keeps to it too: the budget charges the launch tables and chunk headers
    # the flushes write. Over the recording's span (its first clock sample, at its first
    # flush, to its last: the sampler began before, so this is the stricter), with a
    # second more and the same allowance for a late gate. Not yet GPU-run.
    span = (int(rec.flushes["host_time_ns"].max()) - int(rec.clock_samples["monotonic_before"].min())) / 1e9
    assert Path(rec.path).stat().st_size <= burst + 1_000_000 * (span + 1) + 64_000_000, span
    assert "waited" not in proc.stderr  # the budget never makes the program wait


def test_counting_modes_write_no_sampling(tmp_path):
    proc, rec = record(tmp_path, "block_counter", [sys.executable, "-c", LOOP], "--duty", "10ms/50ms")
    assert rec.complete and len(rec.sampling) == 0 and rec.totals["sampled_out"] == 0
