"""The device rings' drain arithmetic (tool/ring_cut.h), compiled with the host
compiler and run against a simulated device whose claims read stale limits:
nothing unread is overwritten, every record is read once, and every window's
accounting adds up (recorded + dropped == attempted)."""

import subprocess

from .native_helpers import compile_check


def test_ring_cuts_lose_nothing_they_do_not_count(tmp_path):
    exe = compile_check(tmp_path / "ring_cut_check", "ring_cut_check.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_ring_pressure_synchronises_before_a_stripe_overflows(tmp_path):
    """The ring-pressure plan (tool/ring_pressure.h) against a simulated program
    that never synchronises: no claim passes its stripe's limit, and the host
    synchronises at most a few times per ring's worth of blocks."""
    exe = compile_check(tmp_path / "ring_pressure_check", "ring_pressure_check.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
