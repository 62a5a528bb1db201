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
