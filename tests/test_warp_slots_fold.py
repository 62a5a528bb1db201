"""block_starts: the tool's fold of warp arrivals into their blocks' slot masks
(tool/warp_slots.cpp), compiled with the host compiler and run on hand-built
windows by tests/native/warp_slots_check.cpp: non-consecutive slots, a graph
replayed twice in one window (same grid id and block), arrivals with no block,
unwritten arrivals, and blocks missing a warp's slot."""

import subprocess

from .native_helpers import compile_check


def test_fold_sets_each_warps_slot_on_its_own_block(tmp_path):
    exe = compile_check(tmp_path / "warp_slots_check", "warp_slots_check.cpp", "warp_slots.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
