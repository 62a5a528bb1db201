"""Time-based recording windows on a loop of CUDA graph replays that never
synchronises (a server queuing decode steps back to back): the windows turn in the
program's stream, replays recorded only inside them, every count exact."""

import json
import os
import sys

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import assert_windows_add_up, record

pytestmark = pytest.mark.gpu

REPLAYS = 4000
LOOP = f"""
import json, time, torch
x = torch.randn(1 << 24, device="cuda")
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


@pytest.mark.parametrize("mode", ["block_counter", "block_trace", "block_starts"])
def test_duty_cycle_turns_in_the_stream_of_a_loop_that_never_synchronises(tmp_path, mode):
    proc, rec = record(tmp_path, mode, [sys.executable, "-c", LOOP], "--duty", "10ms/50ms", env=DEBUG_ENV)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec.complete and rec.damage is None
    assert_windows_add_up(rec)
    turns = [line for line in proc.stderr.splitlines() if "duty cycle:" in line]
    assert turns, proc.stderr[-2000:]
    nodes = (rec.launches["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    recorded_replays = len(np.unique(rec.launches["graph_launch_id"][nodes]))
    # 10 ms of every 50 on the host's clock, where the launches are queued: some
    # replays in, most out (wide bounds: the host queues ahead of the device).
    assert 0 < recorded_replays < 0.7 * ran["replays"], (recorded_replays, turns)
    s = analysis.summary(rec)
    assert s["unrecorded_launches"] >= ran["replays"] - recorded_replays
    # The gate turns between launches in stream order: no count lands outside a
    # listed launch, and every listed launch counted every block.
    assert s["counts_unattributed"] == 0 and s["events_unattributed"] == 0, s
    table = analysis.launch_table(rec)
    assert (table.counted == table.grid_blocks * table.counted_shared).all()
    if mode == "block_trace" and s["dropped"] == 0:
        assert (table.blocks_recorded == table.grid_blocks).all()
