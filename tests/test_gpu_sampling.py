"""The sampler on a loop of CUDA graph replays that never synchronises (a server
queuing decode steps back to back): the tool's own thread turns the device's
sample gate by a duty cycle or a data budget, every block is counted, records are
kept only while the gate is open, and each flush's records, drops and sampled-out
blocks add up to what it counted."""

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import assert_windows_add_up, exit_flags_match_counts, gpuobs_cli, launches_named, record

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


# Three graphs, captured at three places of the device's duty cycle (16.8 ms of every
# 67.1 ms: --duty 10ms/50ms rounded): A before any replay, B inside an on time, C
# across its end (capture begun before the edge, instantiated after it); then replayed
# in turn, with no synchronisation, for about 8 periods. The device's clock is read by
# a kernel of the program's own (CuPy), so the places are the device's, not the host's.
DUTY_PERIOD, DUTY_ON = 1 << 26, 1 << 24
DUTY_CLOCK_KERNEL = (
    'extern "C" __global__ void device_now(unsigned long long* t) {'
    ' unsigned long long v; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v)); *t = v; }'
)
DUTY_LOOP = f"""
import json, time, cupy, torch
clock = cupy.RawKernel({DUTY_CLOCK_KERNEL!r}, "device_now")
now = cupy.zeros(1, dtype=cupy.uint64)
polls = 0
def device_ns():
    global polls
    polls += 1
    clock((1,), (1,), (now,))
    return int(now.get()[0])
def wait_for_phase(lo, hi):
    give_up = time.perf_counter() + 10
    while not lo <= device_ns() % {DUTY_PERIOD} < hi:
        assert time.perf_counter() < give_up, "the device clock never reached the phase"
        time.sleep(0.0002)
x = torch.randn(1 << 22, device="cuda")
side = torch.cuda.Stream()
def capture(op, hold=0.0):
    g = torch.cuda.CUDAGraph()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(g, stream=side):
        op()
        time.sleep(hold)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    return g
a = capture(lambda: x.mul_(1.0001))
wait_for_phase({DUTY_ON} // 4, {DUTY_ON} // 2)
b = capture(lambda: x.add_(1.0))
wait_for_phase({DUTY_ON} - 2_000_000, {DUTY_ON} - 1_000_000)
c = capture(lambda: x.neg_(), hold=0.004)
graphs = [a, b, c]
t0 = time.perf_counter()
replays = 0
while time.perf_counter() - t0 < 8 * {DUTY_PERIOD} / 1e9:
    for _ in range(30):
        graphs[replays % 3].replay()
        replays += 1
    time.sleep(0.0005)
torch.cuda.synchronize()
print(json.dumps({{"replays": replays, "s": time.perf_counter() - t0, "polls": polls}}))
"""


@pytest.mark.parametrize("mode", ["block_trace", "block_starts"])
def test_duty_cycle_on_the_device_records_only_its_on_times(tmp_path, mode):
    pytest.importorskip("cupy")  # the program reads the device's clock with a kernel of its own
    # A ring that holds the run (about 40M records), so that no drop exempts the exits' check.
    args = ("--duty", "10ms/50ms", "--budget", "0", "--device-memory", "8192")
    proc, rec = record(tmp_path, mode, [sys.executable, "-c", DUTY_LOOP], *args, env=DEBUG_ENV)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec.complete and rec.damage is None
    assert_sampling_adds_up(rec)  # recorded + dropped + sampled out == counted, every flush
    d = rec.sampling[-1]
    assert int(d["flags"]) & schema.SamplingFlag.DUTY_ON_DEVICE, "kept on the device's clock"
    assert (int(d["duty_on_ns"]), int(d["duty_period_ns"])) == (DUTY_ON, DUTY_PERIOD)
    assert int(rec.sampling["gate_turns"].sum()) == 0, "no host gate turned"
    assert "--duty kept on the device's clock as 16.7772 ms of every 67.1089 ms" in proc.stderr
    s = analysis.summary(rec)
    assert s["counts_unattributed"] == 0 and s["events_unattributed"] == 0, s
    # Every record starts in an on time (its block's entry read the clock a moment before
    # it stamped the start: 20 us of slack at the edge).
    starts = rec.events["time_start"][rec.events["kind"] == schema.EventKind.BLOCK].astype(np.int64)
    phase = starts % DUTY_PERIOD
    assert len(starts) and (phase < DUTY_ON + 20_000).all(), np.sort(phase)[-5:]
    # Each graph recorded in some on time, none counted outside: replays either listed
    # (their counts whole, but at an edge) or settled as unrecorded, once each.
    table = analysis.launch_table(rec)
    for name in ("MulFunctor", "_add<", "neg_kernel"):
        hits = [i for i in launches_named(rec, name) if rec.launches["flags"][i] & schema.LaunchFlag.GRAPH_NODE]
        assert hits and table.blocks_recorded[hits].sum() > 0, name
    nodes = (rec.launches["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    listed_replays = len(np.unique(rec.launches["graph_launch_id"][nodes]))
    # Every replay listed or settled as unrecorded, exactly once. The unrecorded launches
    # also hold the program's plain launches of the off time (its clock polls and torch's
    # setup, alone in their slots): the tool's own count of the plain launches it saw
    # (its debug line at exit) less those listed. (A replay whose window also holds an
    # on-time replay of its graph stays listed, with no block.)
    seen = re.search(r"callbacks: launch (\d+), graph node \d+, graph launch (\d+)", proc.stderr)
    assert seen, "the tool's callback counts at exit (GPUOBS_DEBUG)"
    plain_seen, replays_seen = int(seen[1]), int(seen[2])
    assert replays_seen == ran["replays"] and plain_seen >= ran["polls"], (plain_seen, replays_seen, ran)
    plain_settled = plain_seen - int((~nodes).sum())
    settled_replays = rec.totals["unrecorded_launches"] - plain_settled
    assert plain_settled >= 0 and listed_replays + settled_replays == ran["replays"], (
        listed_replays,
        settled_replays,
        plain_seen,
        ran,
    )
    # About a quarter of the replays recorded: the on time's share (16.8 of 67.1 ms).
    recorded_replays = len(np.unique(rec.launches["graph_launch_id"][nodes & (table.blocks_recorded > 0)]))
    assert 0.08 * ran["replays"] <= recorded_replays <= 0.5 * ran["replays"], (recorded_replays, ran)
    # A slot's count short of whole grids only where a replay crossed an edge: at most one
    # replay per graph and edge (two edges a period), each in one window's slot.
    grid = np.maximum(table.grid_blocks, 1)
    partial_slots = np.unique(table.count_slot[(table.counted >= 0) & (table.counted % grid != 0)])
    assert len(partial_slots) <= 3 * 2 * (ran["s"] / (DUTY_PERIOD / 1e9) + 2), len(partial_slots)
    assert (table.counted <= table.grid_blocks * np.maximum(table.counted_shared, 1)).all()
    if mode == "block_trace":
        # Exits stamp through one more on length (16.8 ms, against kernels of microseconds),
        # so every recorded block has its end: its leader's own warp exits after the leader
        # published the event. (Exit counts do not add up against the unmatched exits here as
        # they do without a duty cycle: a graph's replays share their grid id, so a replay's
        # early exits find the slot of the replay before, and at an edge one of the two is
        # unrecorded: the first on-time replay's early exits find a slot marked "no event"
        # and stop, the first off-time replay's stamp the last recorded one. Both are flagged.)
        ev, missing, _, _ = exit_flags_match_counts(rec)
        assert (ev["exit_count"] > 0).all(), int((ev["exit_count"] == 0).sum())
        assert (ev["time_end"] >= ev["time_start"]).all()
        print(f"exits: missing {int(missing.sum())}, unmatched {rec.totals['unmatched_exit_threads']}")
    info = gpuobs_cli("info", rec.path, check=True).stdout
    info = " ".join(info.split())  # info wraps its values to the terminal's width
    assert "a duty cycle on the device: recorded the first 16.7772 ms of every 67.1089 ms" in info, info


@pytest.mark.parametrize("mode", ["block_trace", "block_starts"])
def test_duty_cycle_from_the_host_counts_every_block(tmp_path, mode):
    """The fallback where the callback data cannot carry the cycle (an arena above
    2^52; GPUOBS_DUTY_ON_HOST forces it): the sampler's thread turns the sample gate,
    every block is counted, records only while the gate is open."""
    env = dict(DEBUG_ENV, GPUOBS_DUTY_ON_HOST="1")
    proc, rec = record(tmp_path, mode, [sys.executable, "-c", LOOP], "--duty", "10ms/50ms", "--budget", "0", env=env)
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
    assert not int(d["flags"]) & schema.SamplingFlag.DUTY_ON_DEVICE
    assert "--duty kept by the tool's thread from the host (GPUOBS_DUTY_ON_HOST)" in proc.stderr
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
    # second more and the same allowance for a late gate.
    span = (int(rec.flushes["host_time_ns"].max()) - int(rec.clock_samples["monotonic_before"].min())) / 1e9
    assert Path(rec.path).stat().st_size <= burst + 1_000_000 * (span + 1) + 64_000_000, span
    assert "waited" not in proc.stderr  # the budget never makes the program wait


def test_counting_modes_write_no_sampling(tmp_path):
    proc, rec = record(tmp_path, "block_counter", [sys.executable, "-c", LOOP], "--duty", "10ms/50ms")
    assert rec.complete and len(rec.sampling) == 0 and rec.totals["sampled_out"] == 0
