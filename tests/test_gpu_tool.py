"""The tool on a real GPU (the lent H200): exact counts, graph safety, concurrency.
Marked gpu: skipped unless GPUOBS_GPU_TESTS=1."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import (
    assert_windows_add_up,
    ends_past_next_run,
    exit_flags_match_counts,
    gpuobs_cli,
    launches_named,
    record,
    run,
)

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
SILU = [sys.executable, str(ROOT / "examples" / "closed_binary" / "run_silu_mul.py")]
TORCH = [sys.executable, str(ROOT / "examples" / "pytorch_ops.py")]
SILU_BLOCKS, SILU_ACCESSES = 6098, 39_807_744


def check_accounting(rec):
    assert_windows_add_up(rec)
    assert rec.totals["incomplete"] == 0


def check_exit_accounting(rec):
    """Every exiting thread of a recorded block either stamped an event or was
    counted as unmatched on the device: with no block dropped the two add up
    exactly. Over- and under-counted events carry their flags."""
    ev, missing, over, early = exit_flags_match_counts(rec)
    assert rec.totals["dropped"] > 0 or int(missing.sum()) == rec.totals["unmatched_exit_threads"]
    # Flagged with a balanced exit count: the end is past the same block's next run
    # in its window (tool/late_ends.h)
    blocks = rec.events["kind"] == schema.EventKind.BLOCK
    past_next = np.zeros(len(ev), bool)
    window = rec.event_devices[blocks].astype(np.int64) << 32 | rec.event_flushes[blocks].astype(np.int64)
    for w in np.unique(window):
        past_next[window == w] = ends_past_next_run(ev[window == w])
    assert not (over & (missing >= 0) & ~past_next).any()
    assert int(over.sum()) == rec.totals["unconfirmed_ends"]
    # Only two things stamp an event with another block's exits: a graph replayed
    # again in the same flush window (same grid id, so the next replay's early
    # exits find the last one's slot), and a launch that raced a flush (the reset
    # claims let a later block take its events). Both are flagged launches.
    of = analysis.launch_index_of_events(rec)[rec.events["kind"] == schema.EventKind.BLOCK]
    flags = rec.launches["flags"][np.maximum(of, 0)]
    explained = (of >= 0) & ((flags & (schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.RACED_FLUSH)) != 0)
    assert not (over & ~explained).any(), "an event was stamped by another block's exits"
    print(f"blocks {len(ev)}: early exits {int(early.sum())}, over-stamped {int(over.sum())}")


def check_every_block_recorded(rec):
    """block_trace: every event belongs to a listed launch, every launch has one
    record per block, and the exits add up."""
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all()
    table = analysis.launch_table(rec, of)
    assert (table.blocks_recorded == table.grid_blocks).all()
    check_exit_accounting(rec)


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
        # every counted access was an attempt or sampled out (the data budget): counts and claims agree
        assert (rec.launch_counts["launches_sharing"] == 1).all()
        t = rec.totals
        assert t["attempted"] + t["sampled_out"] == int(rec.launch_counts["count"].sum())


def test_block_trace_one_record_per_block(tmp_path, silu_lib):
    proc, rec = record(tmp_path, "block_trace", SILU, "--capacity", str(1 << 23))
    check_accounting(rec)
    assert rec.totals["dropped"] == 0
    ev = rec.events
    sm_count = int(rec.devices[0]["sm_count"])
    assert (ev["time_start"] <= ev["time_end"]).all()
    assert (ev["sm_id"] < sm_count).all() and (ev["sm_id_end"] == ev["sm_id"]).all()
    check_exit_accounting(rec)
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all(), "every event's %gridid must match a launch"
    table = analysis.launch_table(rec, of)
    for i in launches_named(rec, "silu_and_mul"):
        assert table.blocks_recorded[i] == SILU_BLOCKS == table.grid_blocks[i] == table.counted[i]
    assert len(rec.clock_samples) >= 1
    cs = rec.clock_samples
    assert (cs["realtime_after"] - cs["realtime_before"] < 10_000_000).all()


@pytest.mark.parametrize(
    "mode", ["off", "block_noop", "block_counter", "block_trace", "mem_noop", "mem_sampled", "mem_full"]
)
def test_pytorch_every_mode(tmp_path, mode):
    proc, rec = record(tmp_path, mode, TORCH)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    check_accounting(rec)
    assert (rec.modules["status"] == (3 if mode == "off" else 1)).sum() >= 3, rec.modules
    names = [rec.launch_function(launch).name for launch in rec.launches]
    assert any(("nvjet" in n) or ("gemm" in n.lower()) or ("cutlass" in n) for n in names), names
    graph = rec.launches[(rec.launches["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0]
    assert len(graph) >= ran["replays"] and len(graph) % ran["replays"] == 0
    if mode in ("block_counter", "block_trace"):
        table = analysis.launch_table(rec)
        # every launch's blocks counted; graph replays sharing a grid id share a count
        known = table.counted >= 0
        assert known.all(), [names[i] for i in np.flatnonzero(~known)]
        assert (table.counted == table.grid_blocks * table.counted_shared).all()
    if mode == "block_trace":
        check_every_block_recorded(rec)


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
    check_exit_accounting(rec)


def test_launch_scope_without_graphs(tmp_path, silu_lib):
    proc, rec = record(tmp_path, "block_counter", SILU, "--scope", "launch")
    table = analysis.launch_table(rec)
    assert [int(table.counted[i]) for i in launches_named(rec, "silu_and_mul")] == [SILU_BLOCKS] * 3


def test_fail_open_on_bad_environment(tmp_path, silu_lib):
    import os

    from gpuobs.record.native_build import build

    env = dict(
        os.environ, LD_PRELOAD=str(build().tool), GPUOBS_MODE="warp_magic", GPUOBS_OUTPUT=str(tmp_path / "x.gpuobs")
    )
    proc = run(SILU, env=env)
    assert proc.returncode == 0
    assert "gpuobs: GPUOBS_MODE='warp_magic' is not one of" in proc.stderr and "running uninstrumented" in proc.stderr
    env.update(
        GPUOBS_MODE="block_trace",
        GPUOBS_PATCHES=str(tmp_path / "missing.fatbin"),
        GPUOBS_SANITIZER_LIB=str(build().sanitizer_lib),
    )
    proc = run(SILU, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "cannot load the device patches" in proc.stderr


def test_record_then_export_in_the_same_directory(tmp_path):
    from .trace_decode import decode

    decode_graph = [sys.executable, ROOT / "examples" / "decode_graph.py", "--steps", "2"]
    rec = gpuobs_cli("record", "--", *decode_graph, cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert (tmp_path / "gpuobs.gpuobs").exists()
    exp = gpuobs_cli("export", "-o", "trace.pftrace", cwd=tmp_path)
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
runtime = gpuobs.record.runtime
print("flushed", gpuobs.flush(), "launches", runtime.launches(), "output", runtime.output_path())
"""


def test_attach_and_flush_from_python(tmp_path):
    out = tmp_path / "attached.gpuobs"
    proc = run([sys.executable, "-c", ATTACH, str(out)])
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr
    assert "flushed 1" in proc.stdout and str(out) in proc.stdout
    rec = gpuobs.load(out)
    table = analysis.launch_table(rec)
    assert len(rec.launches) >= 4 and (table.counted == table.grid_blocks * table.counted_shared).all()
    late = run(
        [sys.executable, "-c", "import torch, gpuobs; torch.zeros(1, device='cuda'); gpuobs.attach(output='x.gpuobs')"],
        cwd=tmp_path,
    )
    assert late.returncode != 0 and "CUDA is already initialised" in late.stderr


def test_a_crashing_program_keeps_its_exit_status_and_flushed_events(tmp_path):
    crash = (
        "import os, signal, torch; x = torch.ones(1 << 20, device='cuda'); print((x * 2).sum().item()); "
        "os.kill(os.getpid(), signal.SIGSEGV)"
    )
    proc, rec = record(tmp_path, "block_trace", [sys.executable, "-c", crash], check=False)
    assert proc.returncode == 128 + 11  # the child's signal, as a shell reports it
    rec = gpuobs.load(tmp_path / "block_trace.gpuobs", salvage=True)
    assert not rec.complete and len(rec.events) > 0 and rec.totals["dropped"] == 0
    assert (analysis.launch_index_of_events(rec) >= 0).all()


SIDE_BY_SIDE = [sys.executable, str(ROOT / "examples" / "side_by_side.py")]


def test_api_trace_links_every_launch_to_its_api_call(tmp_path):
    proc, rec = record(tmp_path, "block_trace", SIDE_BY_SIDE, "--api-trace")
    check_accounting(rec)
    calls, names = rec.api_calls, rec.api_names
    assert len(calls) > 0 and names
    assert (calls["exit_ns"] >= calls["enter_ns"]).all()
    assert len(np.unique(calls["call_id"])) == len(calls)
    by_id = {int(c["call_id"]): c for c in calls}
    for launch in rec.launches:
        call = by_id.get(int(launch["api_call_id"]))
        assert call is not None, f"launch {int(launch['launch_id'])} has no API call"
        name = names[int(call["api_id"])]
        assert "Launch" in name, name
        if launch["flags"] & schema.LaunchFlag.GRAPH_NODE:
            assert "Graph" in name, name
        assert call["enter_ns"] <= launch["host_begin_ns"] <= call["exit_ns"]
    # the runtime call is the outer one, the driver call inside it
    launch_calls = [
        c
        for c in calls
        if names[int(c["api_id"])] in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC")
    ]
    assert launch_calls


def test_unwritable_output_runs_uninstrumented_with_its_exit_code(tmp_path):
    out = Path("/proc/gpuobs-cannot-write-here.gpuobs")  # not writable, even by root
    proc = gpuobs_cli("record", "-o", out, "--", *SIDE_BY_SIDE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("running uninstrumented") == 1, proc.stderr
    assert '"finite": true' in proc.stdout


CRASHES = {
    # name: (program, expected exit status as a shell reports it)
    "abort": ("import os; os.abort()", 128 + 6),
    "kill9": ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9),
    "exception": ("raise RuntimeError('the program failed by itself')", 1),
    "cuda_error": (
        "import ctypes, torch, sys; sys.path.insert(0, %r); import run_silu_mul as r; lib = r.library(); "
        "x = torch.randn(8, 2048, device='cuda', dtype=torch.bfloat16); "
        "lib.silu_and_mul(ctypes.c_void_p(16), ctypes.c_void_p(x.data_ptr()), 8, 1024, None); "
        "torch.cuda.synchronize()" % str(ROOT / "examples" / "closed_binary"),
        1,
    ),
}


@pytest.mark.parametrize("crash", sorted(CRASHES))
def test_crashes_keep_exit_status_and_what_was_flushed(tmp_path, silu_lib, crash):
    program, status = CRASHES[crash]
    # Work that is flushed (a synchronise) before the crash. A synchronisation cuts
    # its window and the drain thread writes it: a caught crash waits for that, a
    # SIGKILL cannot, so the program gives the drain a moment first.
    before = (
        "import time, torch; x = torch.ones(1 << 20, device='cuda'); print((x * 2).sum().item()); "
        "torch.cuda.synchronize()\n" + ("time.sleep(0.5)\n" if crash == "kill9" else "")
    )
    proc, _ = record(tmp_path, "block_trace", [sys.executable, "-c", before + program], check=False)
    assert proc.returncode == status, proc.stderr[-2000:]
    rec = gpuobs.load(tmp_path / "block_trace.gpuobs", salvage=True)
    assert len(rec.events) > 0 and len(rec.launches) > 0
    assert_windows_add_up(rec)
    assert (analysis.launch_index_of_events(rec) >= 0).all()
    if crash in ("abort", "kill9"):
        assert not rec.complete
    assert "Traceback" not in proc.stderr or crash in ("exception", "cuda_error")


def _gpus():
    try:
        out = run(["nvidia-smi", "-L"]).stdout
    except OSError:
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


WINDOWS = [sys.executable, str(ROOT / "examples" / "recording_windows.py")]


MUL_ACCESSES = 2 * (1 << 22) // 4  # x.mul_ on 4M floats: a 16-byte load and store per 4


def check_window_counts(rec, name_part, expected_launches):
    """Launches recorded only inside windows, every one counted exactly, and
    nothing counted for a launch outside them (unattributed == 0: the closed gate
    really stopped the patches)."""
    check_accounting(rec)
    table = analysis.launch_table(rec)
    hits = launches_named(rec, name_part)
    assert len(hits) == expected_launches, [table.name[i] for i in range(len(rec.launches))]
    if rec.run.mode_name.startswith("mem"):
        assert [int(table.counted[i]) for i in hits] == [MUL_ACCESSES] * len(hits)
    else:
        assert (table.counted == table.grid_blocks * table.counted_shared).all()
    assert rec.totals["unattributed"] == 0


GRAPH_NODE = schema.LaunchFlag.GRAPH_NODE


@pytest.mark.parametrize("mode", ["block_counter", "block_trace", "block_starts", "mem_sampled"])
def test_windows_turn_while_graphs_live(tmp_path, mode):
    """Graphs captured before any window, inside one and between two: each replay
    recorded exactly when it ran inside a window, and nothing counted outside
    (the gate closed: no count lands in no listed launch)."""
    env = {**os.environ, "GPUOBS_DEBUG": "1"}
    proc, rec = record(tmp_path, mode, WINDOWS, "--paused", "--capacity", str(1 << 22), env=env)
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    print(ran)
    check_window_counts(rec, "MulFunctor", ran["in"])
    # disarmed, the functions had no callback data (the patches leave before any load),
    # armed they had it again: every turn after the first function loaded, none refused
    bound = r"callback data (given to|taken from) (\d+) functions in [\d.]+ ms \((\d+) refused\)"
    turns = re.findall(bound, proc.stderr)
    assert [t[0] for t in turns if int(t[1])] == ["given to", "taken from"] * 4, turns  # four windows
    assert all(t[2] == "0" for t in turns), turns
    nodes = (rec.launches["flags"] & GRAPH_NODE) != 0
    replays = np.unique(rec.launches["graph_launch_id"][nodes])
    assert len(replays) == ran["replays_in"] == 5, (replays, ran)
    adds = launches_named(rec, "_add<")  # x.add_(scalar): CUDAFunctorOnSelf_add<float>
    assert len(adds) == ran["replays_in"] and all(nodes[i] for i in adds)
    # launches and replays outside windows: counted as unrecorded, nothing else
    assert rec.totals["unrecorded_launches"] >= ran["out"] + ran["replays_out"]
    if mode == "block_trace":
        check_every_block_recorded(rec)
    assert analysis.summary(rec)["unrecorded_launches"] == rec.totals["unrecorded_launches"]


AUTO_WINDOWS = """
import torch
x = torch.randn(1 << 22, device="cuda")
for i in range(40):
    x.mul_(1.0001)
    x.add_(1.0)
    torch.cuda.synchronize()
"""


def test_automatic_windows_record_one_interval_in_n(tmp_path):
    proc, rec = record(tmp_path, "block_counter", [sys.executable, "-c", AUTO_WINDOWS], "--window-every", "4")
    assert rec.run.window_every == 4
    # intervals end at each synchronize: the first (setup, the first step) and then every 4th
    muls = launches_named(rec, "MulFunctor")
    assert 9 <= len(muls) <= 11, len(muls)
    check_window_counts(rec, "MulFunctor", len(muls))
    assert rec.totals["unrecorded_launches"] >= 2 * (40 - len(muls))


TWO_GPUS = """
import json, torch
outs = []
for d in (0, 1):
    x = torch.ones(1 << 20, device=f"cuda:{d}")
    outs.append(float((x * (d + 2)).sum().item()))
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
print(json.dumps({"sums": outs}))
"""


@pytest.mark.skipif(_gpus() < 2, reason="needs two GPUs (kind nvidia-h200-x2)")
def test_one_process_two_gpus_keeps_records_apart(tmp_path):
    proc, rec = record(tmp_path, "block_trace", [sys.executable, "-c", TWO_GPUS])
    check_accounting(rec)
    assert sorted(set(rec.devices["device_index"].tolist())) == [0, 1]
    assert sorted(set(rec.event_devices.tolist())) == [0, 1]
    assert len(set(bytes(u) for u in rec.devices["uuid"])) == 2
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all()
    # an event's launch is on the event's device
    assert (rec.launches["device_index"][of] == rec.event_devices).all()
    table = analysis.launch_table(rec, of)
    assert (table.blocks_recorded == table.grid_blocks).all()


@pytest.mark.skipif(_gpus() < 2, reason="needs two GPUs (kind nvidia-h200-x2)")
def test_two_processes_one_gpu_each_merge_into_one_trace(tmp_path):
    import os

    from .trace_decode import decode

    procs = []
    for gpu in (0, 1):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
        out = tmp_path / f"rank{gpu}.gpuobs"
        procs.append(
            (
                out,
                subprocess.Popen(
                    [sys.executable, "-m", "gpuobs", "record", "-o", str(out), "--", *SIDE_BY_SIDE],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    for _out, p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
    recs = [gpuobs.load(out) for out, _ in procs]
    uuids = {bytes(r.devices["uuid"][0]) for r in recs}
    assert len(uuids) == 2, "each process saw its own GPU"
    exp = gpuobs_cli("export", procs[0][0], procs[1][0], "-o", tmp_path / "merged.pftrace")
    assert exp.returncode == 0, exp.stderr
    d = decode(tmp_path / "merged.pftrace")
    assert d.problems == []
    gpu_groups = [t for t in d.tracks.values() if t.name.startswith("GPU ") and "(pid " in t.name]
    assert len(gpu_groups) == 2
    blocks = [s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    assert len(blocks) == sum(len(r.events) for r in recs)
