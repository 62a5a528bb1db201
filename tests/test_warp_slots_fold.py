"""block_starts: the tool's fold of warp arrivals into their blocks' slot masks
(tool/warp_slots.cpp), compiled with the host compiler and run on hand-built
windows by tests/native/warp_slots_check.cpp: non-consecutive slots, a graph
replayed twice in one window (same grid id and block), arrivals with no block,
unwritten arrivals, and blocks missing a warp's slot."""

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuobs.native_sources import native_root

HERE = Path(__file__).resolve().parent


def test_fold_sets_each_warps_slot_on_its_own_block(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    exe = tmp_path / "warp_slots_check"
    root = native_root()
    subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{root / 'tool'}",
            f"-I{root / 'schemas'}",
            str(HERE / "native" / "warp_slots_check.cpp"),
            str(root / "tool" / "warp_slots.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
    )
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
