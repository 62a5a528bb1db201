"""Launch counts at a drain (tool/launch_counts.cpp), compiled with the host compiler
and run against a simulated program: a graph replayed back to back, one replay per
quiet window, the next replay running before the drain's harvest, keeps each replay's
count exact (read at the cut) or marks it shared, never gives one replay two replays'
blocks; a launch cut but not yet queued keeps its slot's growth (no counts of no
listed launch)."""

import subprocess

from .native_helpers import compile_check


def test_replayed_graph_nodes_keep_their_own_counts(tmp_path):
    exe = compile_check(tmp_path / "launch_counts_check", "launch_counts_check.cpp", "launch_counts.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
