"""block_starts on a real GPU against kernels that time themselves
(tests/gpu_programs/warp_slots.cu: every warp reads its SM, %warpid and
%globaltimer at its first and last instruction): every block recorded once on
its SM, with exactly the slots its warps took, and an end bound never earlier
than the block's true end. Full occupancy, uneven blocks, one wave, one block
per SM, and two kernels sharing SMs at once. Marked gpu."""

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_every_block_bounded_never_before_its_true_end(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    import block_starts_accuracy

    results = block_starts_accuracy.truth_part(scale=8, workdir=tmp_path)
    print(results)
    assert sorted(results) == ["elementwise", "mixed_a", "mixed_b", "one_per_sm", "one_wave", "uneven"]
    for name, r in results.items():
        assert r["recorded"] == r["blocks"] and r["duplicates"] == 0, name
        assert r["sm_mismatch"] == 0 and r["mask_mismatch"] == 0 and r["slots_incomplete"] == 0, name
        assert r["bound_before_true_end"] == 0, name
        # every block has some bound: the program synchronises after each kernel
        assert "none" not in r["by_quality"], (name, r["by_quality"])
    # full occupancy: most ends come from slot reuse, and tightly
    full = results["elementwise"]
    assert full["by_quality"]["slot"]["blocks"] >= 0.95 * full["blocks"]
    assert full["by_quality"]["slot"]["within_2us"] >= 0.9
