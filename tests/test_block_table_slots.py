"""block_trace's block-table slot mapping (the schema's gpuobs_block_table_slot,
which the device patch uses), compiled with the host compiler: blocks of 64
consecutive grid ids with up to 4,096 blocks each in flight never share a slot,
nor do any 262,144 consecutive blocks of one grid."""

import subprocess

from .native_helpers import compile_check


def test_concurrent_small_grids_and_one_big_grid_never_share_a_slot(tmp_path):
    exe = compile_check(tmp_path / "block_table_check", "block_table_check.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
