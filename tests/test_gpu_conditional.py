"""On a real GPU: a CUDA graph with a WHILE conditional node (tests/gpu_programs/
while_graph.cu), the shape of XLA's loop command buffers. The driver reports a body's
kernel nodes once per replay however often the device runs them: each must be listed
once per replay, flagged CONDITIONAL_BODY, with the count and records of all its runs
(exactly ITERS runs of its grid), named in a CONDITIONAL_BODIES notice; the kernel
before the loop must not be flagged, and count its grid. Marked gpu; about 5 s."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import check_launch_counts, gpuobs_cli, record

pytestmark = pytest.mark.gpu
SRC = Path(__file__).resolve().parent / "gpu_programs"
ITERS, REPLAYS = 5, 4


def test_while_body_kernels_listed_once_per_replay_with_all_their_runs(tmp_path):
    exe = tmp_path / "while_graph"
    subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", str(exe), str(SRC / "while_graph.cu")], check=True)
    proc, rec = record(tmp_path, "block_trace", [str(exe), str(ITERS), str(REPLAYS)])
    truth = json.loads(proc.stdout.strip().splitlines()[0])
    assert truth["counted"]["loop_body"] == truth["grids"]["loop_body"] * ITERS * REPLAYS  # the program's own count
    assert rec.complete and rec.totals["dropped"] == 0
    table = analysis.launch_table(rec)
    body_flag = (rec.launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    runs = analysis.conditional_runs(rec, table)
    for kernel, in_body in (("before_loop", False), ("loop_body", True), ("loop_condition", True)):
        rows = np.array([i for i, name in enumerate(table.name) if kernel in name])
        assert len(rows) == REPLAYS, (kernel, len(rows))  # listed once per replay
        assert (body_flag[rows] == in_body).all(), (kernel, rec.launches["flags"][rows])
        grid = truth["grids"][kernel]
        per_replay = grid * (ITERS if in_body else 1)
        assert (table.blocks_recorded[rows] == per_replay).all(), (kernel, table.blocks_recorded[rows])
        alone = rows[table.counted_shared[rows] == 1]
        assert (table.counted[alone] == per_replay).all(), (kernel, table.counted[rows], table.counted_shared[rows])
        if in_body:
            assert (runs[alone] == ITERS).all(), (kernel, runs[rows])
    check_launch_counts(rec, table)
    notes = [n.text for n in rec.notices if n.code == "conditional_bodies"]
    assert notes and "loop_body" in " ".join(notes) and "loop_condition" in " ".join(notes), rec.notices
    assert "before_loop" not in " ".join(notes)
    info = json.loads(gpuobs_cli("info", "--json", rec.path, check=True).stdout)
    assert info["counts_unattributed"] == 0 and info["events_unattributed"] == 0
    assert info["conditional_body_launches"] == 2 * REPLAYS
