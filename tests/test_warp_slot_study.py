"""benchmarks/warp_slot_study.study() on hand-built warp rows (CPU): the all-slots
bound waits for a successor in every slot a block took, and the first-warp-only
bound is caught falling before a block's end when another of its warps outlives it."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from warp_slot_study import WARP_ROW, study  # noqa: E402


def warps(*rows):
    """rows: (block, warp_in_block, slot, t_first, t_last), all on SM 0 of grid 1."""
    out = np.zeros(len(rows), dtype=WARP_ROW)
    for i, (block, warp, slot, t0, t1) in enumerate(rows):
        out[i] = (1, block, t0, t1, 0, slot, slot, warp, 0, (0, 0, 0))
    return out


def test_first_warp_bound_before_end_is_counted_and_all_slots_bound_is_not_early():
    rows = warps(
        (0, 0, 0, 0, 100),  # block 0: warp 0 in slot 0 ends at 100,
        (0, 1, 1, 0, 300),  # warp 1 in slot 1 runs until 300
        (1, 0, 0, 150, 400),  # block 1 takes slot 0 at 150: before block 0's end
        (1, 1, 5, 150, 400),
        (2, 0, 1, 350, 500),  # block 2 takes slot 1 at 350
    )
    s = study({"k": rows}, ["k"])["k"]
    assert s["blocks"] == 3
    assert s["blocks_with_successor_in_first_warps_slot"] == 1
    assert s["first_warps_slot_bound_before_true_end"] == 1
    assert s["first_warps_slot_bound_earliest_ns"] == 150 - 300
    assert s["blocks_with_successor_in_every_slot"] == 1
    assert s["bound_before_true_end"] == 0
    assert s["bound_minus_end_ns"]["max"] == 350 - 300


def test_first_warp_bound_that_holds_is_not_counted():
    rows = warps((0, 0, 0, 0, 100), (0, 1, 1, 0, 120), (1, 0, 0, 200, 300), (1, 1, 1, 200, 300))
    s = study({"k": rows}, ["k"])["k"]
    assert s["first_warps_slot_bound_before_true_end"] == 0
    assert s["first_warps_slot_bound_earliest_ns"] == 80
