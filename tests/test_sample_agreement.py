"""benchmarks/sample_agreement.py's comparison on synthetic recordings: a full one
and a sampled one of another run of the same program (other jitter), the sampled
one keeping only blocks that started while the gate was open (a burst at the
start, then short stretches), agree; a sampled one biased against a kernel, with
a kernel's SMs skewed, its spans stretched or its counts off, does not."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

ROOT = Path(__file__).resolve().parents[1]
REPLAYS = 1000  # graph replays, each three kernels (function slots 0, 1, 2) of BLOCKS blocks
BLOCKS = 66
TICK = 32


def _agreement():
    spec = importlib.util.spec_from_file_location("sample_agreement", ROOT / "benchmarks" / "sample_agreement.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


agreement = _agreement()


def program(seed):
    """One run: REPLAYS replays of a three-kernel graph, stamps on a 32 ns timer."""
    ev, launches = synthetic.block_trace_events(3 * REPLAYS, BLOCKS, sm_count=132, seed=seed)
    launches["flags"] = schema.LaunchFlag.GRAPH_NODE
    launches["graph_launch_id"] = np.arange(len(launches)) // 3 + 1
    for column in ("time_start", "time_end"):
        ev[column] -= ev[column] % np.uint64(TICK)
    return ev, launches


def gate_open(starts, seed=0):
    """The blocks that started while the gate was open: the first 15% of the run (the
    burst), then 0.3 ms of every ~1.5 ms, at jittered times."""
    rng = np.random.default_rng(seed)
    t = starts.astype(np.int64) - int(starts.min())
    span = int(t.max())
    keep = t < 0.15 * span
    at = 0.15 * span
    while at < span:
        at += rng.uniform(1.0e6, 2.0e6)
        keep |= (t >= at) & (t < at + 300_000)
        at += 300_000
    return keep


def write(path, ev, launches, sampled_out=0, counts=None):
    counts = synthetic.whole_launch_counts(launches, BLOCKS) if counts is None else counts
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 22, argv=["python3", "serve.py"])
        w.device(name="NVIDIA H200", sm_count=132)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(synthetic.FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.launches(launches)
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0, launch_counts=counts)
        if sampled_out:
            w.sampling(sampled_out=sampled_out, budget_bytes_per_s=16_000_000, burst_bytes=60_000_000, gate_turns=15)
        w.events(ev)
        w.end(flushes=1, launches=len(launches), events=len(ev))
    return gpuobs.load(path)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    ev, launches = program(seed=0)
    return write(tmp_path_factory.mktemp("full") / "full.gpuobs", ev, launches)


def sampled(tmp_path, bias=None):
    ev, launches = program(seed=1)
    total = len(ev)
    ev = ev[gate_open(ev["time_start"])]
    counts = None
    slot = ev["function_slot"]
    if bias == "kernel":  # the gate shut more often on kernel 0: half its launches lost
        gone = np.isin(ev["grid_id"], launches["grid_id"][0::6])
        ev = ev[~gone]
    elif bias == "sms":  # kernel 1's blocks of SMs 0..29 all on SM 0
        ev["sm_id"][(slot == 1) & (ev["sm_id"] < 30)] = 0
    elif bias == "spans":  # kernel 2's blocks a quarter longer
        mine = slot == 2
        ev["time_end"][mine] += (ev["time_end"][mine] - ev["time_start"][mine]) // 4
    elif bias == "counts":  # one launch counted a block short
        counts = synthetic.whole_launch_counts(launches, BLOCKS)
        counts["count"][7] -= 1
    return write(tmp_path / "sampled.gpuobs", ev, launches, sampled_out=total - len(ev), counts=counts)


def test_agreeing_recordings_pass(tmp_path, full):
    result = agreement.compare(full, sampled(tmp_path))
    agreement.report(result, "agreeing")
    checks = result["checks"]
    assert result["pass"], {k: c["failed"] for k, c in checks.items()}
    share = result["sampled"]["recorded"] / (3 * REPLAYS * BLOCKS)
    assert 0.2 < share < 0.5, share  # sampled, not whole
    for key in ("share", "share_pp", "sms", "spans"):
        assert checks[key]["evaluated"] == 3, (key, checks[key])
    assert result["full"]["tick_ns"] == TICK and result["sampled"]["tick_ns"] == TICK
    # the tolerances bite: every allowance is well below the biases the next test makes
    assert all(r["tol"] < 0.1 for r in checks["share"]["rows"])
    assert all(r["tol"] < 0.15 for r in checks["sms"]["rows"])


@pytest.mark.parametrize(
    "bias, failing",
    [("kernel", {"share", "share_pp"}), ("sms", {"sms"}), ("spans", {"spans"}), ("counts", {"counts"})],
)
def test_biased_recordings_fail(tmp_path, full, bias, failing):
    result = agreement.compare(full, sampled(tmp_path, bias))
    agreement.report(result, bias)
    assert not result["pass"]
    assert {k for k, c in result["checks"].items() if not c["pass"]} == failing


def test_block_starts_spans_shown_not_checked(tmp_path):
    path, _ = synthetic.write_block_starts_recording(tmp_path / "starts.gpuobs", dropped_every=10**9)
    rec = gpuobs.load(path)
    result = agreement.compare(rec, rec, agreement.Tolerances(min_records=10))
    assert result["pass"], result["checks"]
    assert result["checks"]["spans"]["evaluated"] == 0


def test_tv_distance():
    assert agreement.tv_distance(np.array([1, 1]), np.array([2, 2, 0])) == 0
    assert agreement.tv_distance(np.array([1, 0]), np.array([0, 1])) == 1
