"""tool/late_ends.h, compiled with the host compiler, over the flush windows of a
real recording (tests/data/while_graph_block_trace.gpuobs, H100: a WHILE body's
runs and replays share grid ids, and each run's ends were stamped by the next
run's early exits, most without the exit count telling). Checked against numpy:
exactly the unflagged ends later than the same block's next start in the window
are flagged, and afterwards no loop_body run reaches past the next one."""

import subprocess
from pathlib import Path

import numpy as np

import gpuobs
from gpuobs.recording_file import schema

from .gpu_helpers import ends_past_next_run
from .native_helpers import compile_check

WHILE_GRAPH = Path(__file__).resolve().parent / "data" / "while_graph_block_trace.gpuobs"


def test_ends_past_the_next_run_are_flagged(tmp_path):
    exe = compile_check(tmp_path / "late_ends_check", "late_ends_check.cpp")
    rec = gpuobs.load(WHILE_GRAPH)
    flushes = rec.event_flushes
    total = 0
    for flush in np.unique(flushes):
        launches = np.ascontiguousarray(rec.launches[rec.launch_flushes == flush])
        ev = np.ascontiguousarray(rec.events[flushes == flush])
        grids = {int(g) for g, n in zip(*np.unique(launches["grid_id"], return_counts=True)) if n > 1}
        grids |= {int(g) for g in launches["grid_id"][(launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0]}
        src, dst = tmp_path / f"in{flush}", tmp_path / f"out{flush}"
        src.write_bytes(np.array([len(launches), len(ev)], np.uint64).tobytes() + launches.tobytes() + ev.tobytes())
        proc = subprocess.run([str(exe), str(src), str(dst), "1"], capture_output=True, text=True, check=True)
        out = np.frombuffer(dst.read_bytes(), ev.dtype)
        # bucket by bucket on 4 threads: the same flags
        subprocess.run([str(exe), str(src), str(tmp_path / "out4"), "4"], capture_output=True, check=True)
        assert (tmp_path / "out4").read_bytes() == dst.read_bytes()
        was = (ev["flags"] & schema.BLOCK_END_UNCONFIRMED) != 0
        now = (out["flags"] & schema.BLOCK_END_UNCONFIRMED) != 0
        expected = was | ends_past_next_run(ev, grids)
        assert (now == expected).all(), flush
        assert int(proc.stdout) == int((now & ~was).sum())
        assert (
            out["flags"] & ~np.uint16(schema.BLOCK_END_UNCONFIRMED)
            == ev["flags"] & ~np.uint16(schema.BLOCK_END_UNCONFIRMED)
        ).all()
        total += int(proc.stdout)
        # afterwards no unflagged loop_body end reaches past the same block's next run
        assert not ends_past_next_run(out[~now], grids).any()
    # the recording's own late stamps that the exit count missed: the last run of each replay (and more)
    assert total >= 3 * 96 - 10, total
