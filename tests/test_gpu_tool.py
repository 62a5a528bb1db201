"""The tool on a real GPU (the lent H200): exact counts, graph safety, concurrency.
Marked gpu: skipped unless GPUOBS_GPU_TESTS=1."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs import analysis, schema

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
SILU = [sys.executable, str(ROOT / "examples" / "closed_binary" / "run_silu_mul.py")]
TORCH = [sys.executable, str(ROOT / "examples" / "pytorch_ops.py")]
SILU_BLOCKS, SILU_ACCESSES = 6098, 39_807_744


def record(tmp_path, mode, cmd, *extra, name=None, check=True, env=None):
    out = tmp_path / f"{name or mode}.gpuobs"
    proc = subprocess.run([sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(out), *extra, "--", *cmd],
                          capture_output=True, text=True, env=env)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, (gpuobs.load(out) if out.exists() else None)


def check_accounting(rec):
    f = rec.flushes
    assert (f["recorded"] + f["dropped"] == f["attempted"]).all()
    assert rec.totals["incomplete"] == 0


def launches_named(rec, pattern):
    return [i for i, l in enumerate(rec.launches) if pattern in rec.function(l["device_index"], l["function_slot"]).name]


@pytest.fixture(scope="module")
def silu_lib():
    subprocess.run(SILU + ["--iters", "1", "--tokens", "8"], check=True)


def test_block_counter_counts_every_block(tmp_path, silu_lib):
    proc, rec = record(tmp_path, "block_counter", SILU)
    check_accounting(rec)
    table = analysis.launch_table(rec)
    silu = launches_named(rec, "silu_and_mul")
    assert len(silu) == 3
    assert [int(table.counted[i]) for i in silu] == [SILU_BLOCKS] * 3
    assert all(table.counted_shared[i] == 1 for i in silu)
    assert (rec.modules["patch_count"] <= 1).all() and (rec.modules["status"] == 1).any()


@pytest.mark.parametrize("mode", ["mem_sampled", "mem_full"])
def test_memory_modes_count_exactly(tmp_path, silu_lib, mode):
    # The example's own torch kernels (inputs, reference check) are patched too:
    # room for all of their samples, so that mem_sampled drops nothing.
    proc, rec = record(tmp_path, mode, SILU, "--capacity", str(1 << 23))
    check_accounting(rec)
    table = analysis.launch_table(rec)
    silu = launches_named(rec, "silu_and_mul")
    assert [int(table.counted[i]) for i in silu] == [SILU_ACCESSES] * 3
    if mode == "mem_sampled":
        kept = table.events_kept[silu]
        assert rec.totals["dropped"] == 0
        assert np.all(np.abs(kept - SILU_ACCESSES / 1024) <= 0.05 * SILU_ACCESSES / 1024), kept
    else:
        assert rec.totals["dropped"] > 0  # 3 x 39.8M accesses into 8M records
        # every counted access was an attempt: counts and claims agree exactly
        assert (rec.launch_counts["launches_sharing"] == 1).all()
        assert rec.totals["attempted"] == int(rec.launch_counts["count"].sum())


def test_block_trace_one_record_per_block(tmp_path, silu_lib):
    proc, rec = record(tmp_path, "block_trace", SILU, "--capacity", str(1 << 23))
    check_accounting(rec)
    assert rec.totals["dropped"] == 0
    ev = rec.events
    sm_count = int(rec.devices[0]["sm_count"])
    assert (ev["time_start"] <= ev["time_end"]).all()
    assert (ev["sm_id"] < sm_count).all() and (ev["sm_id_end"] == ev["sm_id"]).all()
    assert rec.totals["unconfirmed_ends"] == 0 and rec.totals["unmatched_exit_threads"] == 0
    assert not (ev["flags"] & schema.BLOCK_END_UNCONFIRMED).any(), "last-exit tracking failed for some blocks"
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all(), "every event's %gridid must match a launch"
    table = analysis.launch_table(rec, of)
    for i in launches_named(rec, "silu_and_mul"):
        assert table.blocks_recorded[i] == SILU_BLOCKS == table.grid_blocks[i] == table.counted[i]
    assert len(rec.clock_samples) >= 1
    cs = rec.clock_samples
    assert (cs["realtime_after"] - cs["realtime_before"] < 10_000_000).all()


@pytest.mark.parametrize("mode", ["off", "block_noop", "block_counter", "block_trace", "mem_noop", "mem_sampled",
                                  "mem_full"])
def test_pytorch_every_mode(tmp_path, mode):
    proc, rec = record(tmp_path, mode, TORCH)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    check_accounting(rec)
    assert (rec.modules["status"] == (3 if mode == "off" else 1)).sum() >= 3, rec.modules
    names = [rec.function(l["device_index"], l["function_slot"]).name for l in rec.launches]
    assert any(("nvjet" in n) or ("gemm" in n.lower()) or ("cutlass" in n) for n in names), names
    graph = rec.launches[rec.launches["flags"] == 1]
    assert len(graph) >= ran["replays"] and len(graph) % ran["replays"] == 0
    if mode in ("block_counter", "block_trace"):
        table = analysis.launch_table(rec)
        # every launch's blocks counted; graph replays sharing a grid id share a count
        known = table.counted >= 0
        assert known.all(), [names[i] for i in np.flatnonzero(~known)]
        assert (table.counted == table.grid_blocks * table.counted_shared).all()
    if mode == "block_trace":
        of = analysis.launch_index_of_events(rec)
        assert (of >= 0).all()
        table = analysis.launch_table(rec, of)
        assert (table.blocks_recorded == table.grid_blocks).all()


def test_modules_from_eight_threads_each_patched_once(tmp_path):
    cubin = tmp_path / "count_blocks.cubin"
    exe = tmp_path / "module_threads"
    src = ROOT / "tests" / "gpu_programs"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(cubin), str(src / "count_blocks.cu")], check=True)
    subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", str(exe), str(src / "module_threads.cu"), "-lcuda"], check=True)
    proc, rec = record(tmp_path, "block_trace", [str(exe), str(cubin)])
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    check_accounting(rec)
    ids = rec.modules["module_id"]
    assert len(ids) == len(set(ids.tolist())) >= ran["modules"]
    assert (rec.modules["patch_count"] == 1).all()
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all()
    table = analysis.launch_table(rec, of)
    counted = launches_named(rec, "count_blocks")
    assert len(counted) == ran["modules"] * ran["launches_per_module"]
    assert (table.blocks_recorded[counted] == table.grid_blocks[counted]).all()
    steps = launches_named(rec, "graph_step")
    assert len(steps) == ran["graph_replays"] * ran["graph_nodes"]
    assert (table.blocks_recorded[steps] == ran["graph_blocks"]).all()
    assert not (rec.events["flags"] & schema.BLOCK_END_UNCONFIRMED).any()


def test_launch_scope_without_graphs(tmp_path, silu_lib):
    proc, rec = record(tmp_path, "block_counter", SILU, "--scope", "launch")
    table = analysis.launch_table(rec)
    assert [int(table.counted[i]) for i in launches_named(rec, "silu_and_mul")] == [SILU_BLOCKS] * 3


def test_fail_open_on_bad_environment(tmp_path, silu_lib):
    import os
    from gpuobs.native_build import build
    env = dict(os.environ, LD_PRELOAD=str(build().tool), GPUOBS_MODE="warp_magic", GPUOBS_OUTPUT=str(tmp_path / "x.gpuobs"))
    proc = subprocess.run(SILU, env=env, capture_output=True, text=True)
    assert proc.returncode == 0
    assert "gpuobs: GPUOBS_MODE='warp_magic' is not one of" in proc.stderr and "running uninstrumented" in proc.stderr
    env.update(GPUOBS_MODE="block_trace", GPUOBS_PATCHES=str(tmp_path / "missing.fatbin"),
               GPUOBS_SANITIZER_LIB=str(build().sanitizer_lib))
    proc = subprocess.run(SILU, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "cannot load the device patches" in proc.stderr


def test_record_then_export_in_the_same_directory(tmp_path):
    from .trace_decode import decode
    env = dict(__import__("os").environ)
    run = lambda *args: subprocess.run([sys.executable, "-m", "gpuobs", *args], cwd=tmp_path, capture_output=True,
                                       text=True, env=env)  # noqa: E731
    rec = run("record", "--", sys.executable, str(ROOT / "examples" / "decode_graph.py"), "--steps", "2")
    assert rec.returncode == 0, rec.stderr
    assert (tmp_path / "gpuobs.gpuobs").exists()
    exp = run("export", "trace.pftrace")
    assert exp.returncode == 0, exp.stderr
    d = decode(tmp_path / "trace.pftrace")
    assert d.problems == [] and d.snapshots
    recording = gpuobs.load(tmp_path / "gpuobs.gpuobs")
    blocks = [s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    assert len(blocks) == len(recording.events) > 0


ATTACH = """
import sys, gpuobs
gpuobs.attach(mode="block_counter", output=sys.argv[1])
import torch
x = torch.randn(4096, 4096, device="cuda")
for _ in range(3):
    y = x @ x
print("flushed", gpuobs.flush(), "launches", gpuobs.runtime.launches(), "output", gpuobs.runtime.output_path())
"""


def test_attach_and_flush_from_python(tmp_path):
    out = tmp_path / "attached.gpuobs"
    proc = subprocess.run([sys.executable, "-c", ATTACH, str(out)], capture_output=True, text=True)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr
    assert "flushed 1" in proc.stdout and str(out) in proc.stdout
    rec = gpuobs.load(out)
    table = analysis.launch_table(rec)
    assert len(rec.launches) >= 4 and (table.counted == table.grid_blocks * table.counted_shared).all()
    late = subprocess.run([sys.executable, "-c", "import torch, gpuobs; torch.zeros(1, device='cuda'); "
                           "gpuobs.attach(output='x.gpuobs')"], capture_output=True, text=True, cwd=tmp_path)
    assert late.returncode != 0 and "CUDA is already initialised" in late.stderr


def test_a_crashing_program_keeps_its_exit_status_and_flushed_events(tmp_path):
    crash = ("import os, signal, torch; x = torch.ones(1 << 20, device='cuda'); print((x * 2).sum().item()); "
             "os.kill(os.getpid(), signal.SIGSEGV)")
    proc, rec = record(tmp_path, "block_trace", [sys.executable, "-c", crash], check=False)
    assert proc.returncode == 128 + 11  # the child's signal, as a shell reports it
    rec = gpuobs.load(tmp_path / "block_trace.gpuobs", salvage=True)
    assert not rec.complete and len(rec.events) > 0 and rec.totals["dropped"] == 0
    assert (analysis.launch_index_of_events(rec) >= 0).all()
