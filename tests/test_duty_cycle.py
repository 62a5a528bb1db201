"""The duty cycle on the device's clock, on the host (no GPU): `--duty ON/PERIOD`
rounded to the powers of two of nanoseconds that the patches test (ON up, PERIOD
to the nearer power on a log scale, at least twice ON), the callback data bits
that carry it clear of every address bit, and a flush window's launches that ran
wholly in the off time (count 0) settled as unrecorded, a graph replay once, a
launch that raced the flush kept. tests/native/duty_cycle_check.cpp."""

import subprocess

from .native_helpers import compile_check


def test_duty_cycle_rounding_and_off_time_settling(tmp_path):
    exe = compile_check(tmp_path / "duty_cycle_check", "duty_cycle_check.cpp", "launch_counts.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
