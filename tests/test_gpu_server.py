"""A vLLM-shaped server under `gpuobs record` (tests/gpu_programs/graph_server.py):
a parent that never touches CUDA starts an engine process (multiprocessing spawn,
or forkserver), which starts two workers the same way; the workers replay a CUDA
graph of small kernels once per step, fed over a shared-memory ring, on the one
GPU; the parent stops the engine with SIGTERM and the engine stops its workers with
SIGTERM. Every process that used CUDA must be recorded, in a complete file, with
every replayed block in a listed launch and counted exactly; `gpuobs export` merges
the files into one trace with a GPU track per process named by its pid. Marked gpu;
each case about 20 s."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.record.run import child_recordings
from gpuobs.recording_file import schema

from .gpu_helpers import check_launch_counts, gpuobs_cli, record
from .trace_decode import decode

pytestmark = pytest.mark.gpu
SERVER = Path(__file__).resolve().parent / "gpu_programs" / "graph_server.py"
STEPS = 40
REPLAYED = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE


def _serve(tmp_path, start, *extra):
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    cmd = [sys.executable, str(SERVER), "--start", start, "--steps", str(STEPS), "--out-dir", str(out_dir), *extra]
    proc, main = record(tmp_path, "block_trace", cmd, name="server", timeout=300)
    reports = {p.stem: json.loads(p.read_text()) for p in out_dir.glob("*.json")}
    files = ([tmp_path / "server.gpuobs"] if main is not None else []) + child_recordings(tmp_path / "server.gpuobs")
    return proc, reports, files


def _check_served(reports):
    assert sorted(reports) == ["engine", "parent", "worker0", "worker1"], reports
    assert reports["parent"]["engine_exit"] == 0
    assert reports["engine"]["exitcodes"] == [0, 0]  # the workers left through SIGTERM's SystemExit
    for w in ("worker0", "worker1"):
        assert reports[w]["state"] == "stopped" and reports[w]["replays"] == STEPS, reports[w]


def _check_worker_recording(rec):
    """Complete, nothing dropped or unattributed, STEPS replays of one graph, counts exact."""
    assert rec.complete and rec.damage is None, rec.path
    s = analysis.summary(rec)
    assert s["dropped"] == 0 and s["incomplete"] == 0, s
    assert s["events_unattributed"] == 0 and s["counts_unattributed"] == 0, s
    replayed = (rec.launches["flags"] & REPLAYED) != 0
    replays = np.unique(rec.launches["graph_launch_id"][replayed])
    assert len(replays) == STEPS, (len(replays), rec.path)
    nodes = np.bincount(np.searchsorted(replays, rec.launches["graph_launch_id"][replayed]))
    assert len(set(nodes.tolist())) == 1 and nodes[0] >= 3, nodes  # every replay lists the graph's kernels
    table = analysis.launch_table(rec)
    # block_trace counts and records every block of every launch, each launch on its own;
    # two replays drained in one window (the drain merges quiet windows when it runs
    # behind) share one count, the sum of their grids, and say so (check_launch_counts)
    check_launch_counts(rec, table)
    return int(table.grid_blocks[replayed].sum())


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_every_worker_recorded_complete_and_exact(tmp_path, start):
    """spawn's children leave through sys.exit (CUDA tears down, the tool's destructor
    writes the END chunk). CPython's forkserver (and fork) children leave through
    os._exit: no atexit handler or destructor runs in them, so the tool finishes the
    file in its own _exit (tool/exit_paths.cpp): the forkserver case checks that."""
    proc, reports, files = _serve(tmp_path, start)
    _check_served(reports)
    import gpuobs

    recs = [gpuobs.load(f) for f in files]
    workers = {reports[w]["pid"] for w in ("worker0", "worker1")}
    # The parent and the engine never touch CUDA and write no file; each worker writes one.
    assert {r.run.pid for r in recs} == workers, ([r.run.pid for r in recs], reports)
    replayed = [_check_worker_recording(r) for r in recs]
    assert replayed[0] == replayed[1] > 0  # the same graph, the same steps
    # Their argv: what a spawned or forkserver child's /proc/self/cmdline says (multiprocessing's own line).
    for r in recs:
        assert any("multiprocessing" in a for a in r.run.argv), r.run.argv
    trace = tmp_path / "server.pftrace"
    out = gpuobs_cli("export", *files, "-o", trace)
    assert out.returncode == 0, out.stderr
    d = decode(trace)
    assert d.problems == []
    gpu_tracks = [t.name for t in d.tracks.values() if t.name.startswith("GPU ")]
    for pid in workers:
        assert sum(f"(pid {pid})" in name for name in gpu_tracks) == 1, gpu_tracks


def test_children_without_ld_preload(tmp_path):
    """The engine removes LD_PRELOAD from its environment before starting its workers
    (as frameworks that set their children's LD_PRELOAD do). `gpuobs record` also sets
    CUDA_INJECTION64_PATH: the driver loads the tool at the workers' cuInit, so they
    are recorded all the same, complete and exact."""
    proc, reports, files = _serve(tmp_path, "spawn", "--strip-preload")
    _check_served(reports)
    import gpuobs

    recs = [gpuobs.load(f) for f in files]
    workers = {reports[w]["pid"] for w in ("worker0", "worker1")}
    assert {r.run.pid for r in recs} == workers, (
        f"recorded pids {[r.run.pid for r in recs]}, worker pids {sorted(workers)}: workers started without "
        "LD_PRELOAD were not recorded"
    )
    for r in recs:
        _check_worker_recording(r)
