"""The duty cycle on the device's clock, on the host (no GPU): `--duty ON/PERIOD`
rounded to the powers of two of nanoseconds that the patches test (ON up, PERIOD
to the nearer power on a log scale, at least twice ON), the callback data bits
that carry it clear of every address bit, and a flush window's launches that ran
wholly in the off time (count 0) settled as unrecorded, a graph replay once, a
launch that raced the flush kept. tests/native/duty_cycle_check.cpp."""

import subprocess

import gpuobs
from gpuobs.analysis import sampling
from gpuobs.recording_file import synthetic

from .cli_helpers import gpuobs as run_cli
from .native_helpers import compile_check


def test_duty_cycle_rounding_and_off_time_settling(tmp_path):
    exe = compile_check(tmp_path / "duty_cycle_check", "duty_cycle_check.cpp", "launch_counts.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_info_stats_and_the_trace_say_what_the_duty_cycle_left_out(tmp_path):
    path = synthetic.write_duty_recording(tmp_path / "duty.gpuobs")
    rec = gpuobs.load(path)
    d = sampling.sampling(rec)
    assert d["duty_on_device"] and d["off_time_launches"] == 8 and d["sampled_out"] == 0
    assert sampling.is_active(d)
    said = (
        "a duty cycle on the device: recorded the first 67.1089 ms of every 4.29497 s of the device's clock "
        "(1.56% of the time); outside it nothing was counted, and 8 launches (graph replays once) ran wholly "
        "there, not recorded"
    )
    info = run_cli("info", str(path)).stdout
    assert said in info and "8 more launches ran outside recording windows or a duty cycle's on time" in info
    stats = run_cli("stats", str(path)).stdout
    assert said in stats and "counts are exact in the on time" in stats
    trace = tmp_path / "duty.perfetto-trace"
    run_cli("export", str(path), "-o", str(trace))
    text = trace.read_bytes()
    assert b"Duty cycle: recorded the first 67.1089 ms of every 4.29497 s of the device's clock" in text


def test_a_budget_beside_the_duty_cycle_is_said_apart(tmp_path):
    path = synthetic.write_duty_recording(tmp_path / "both.gpuobs", budget_sampled_out=1000)
    info = run_cli("info", str(path)).stdout
    assert (
        "recorded the first 67.1089 ms of every 4.29497 s of the device's clock (1.56% of the time)" in info
        and "; 1,000 blocks sampled out by a budget of 16 MB/s with bursts of 256 MiB" in info
    ), info


def test_stats_says_why_listed_launches_have_no_block(tmp_path):
    path = synthetic.write_duty_recording(tmp_path / "listed.gpuobs", listed_off=(3, 4))
    stats = run_cli("stats", str(path)).stdout
    assert (
        "2 of 6 launches have no block recorded, so no span, and are not in it (graph replays that ran in the "
        "duty cycle's off time, or sampled out)" in stats
    ), stats
