"""The register saves each block and memory patch pays on every call, read from
its SASS (needs nvcc and cuobjdump, no GPU). Every thread of every block runs a
block-entry patch, so a save there costs every thread: block_starts' entry
measured 0.78-0.82x of its time with nothing recorded but its 5 saves kept, and
fitting both block entries to the scratch registers (block_starts 0 saves,
block_trace 1 now, 2 when measured) made block_starts 6-21% and block_trace 4-15% faster on the H200
(docs/benchmarks.md). These counts are the ones measured; a change that adds
saves to a hot path should be measured again (benchmarks/patch_ab.py) before it
lands."""

import importlib.util
import shutil
from pathlib import Path

import pytest

from gpuobs.record.native_build import NativeUnavailable, find_toolchain

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("patch_sass", ROOT / "benchmarks" / "patch_sass.py")
patch_sass = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patch_sass)

# Stack stores + loads in each patch's code (every path), at most, on sm_90 (the H200's, where they were measured).
MOST_STACK_OPS = {
    "gpuobs_block_noop": 0,
    "gpuobs_block_exit_noop": 0,
    "gpuobs_block_counter": 0,
    "gpuobs_block_trace_enter": 4,  # 2 before the record gate (b9dd7f3, measured: docs/benchmarks.md)
    "gpuobs_block_trace_exit": 0,
    "gpuobs_block_starts_enter": 0,
    "gpuobs_mem_noop": 0,
    "gpuobs_mem_access": 6,
    # The _duty twins (a duty cycle on the device): the clock's test adds no save
    # (ptxas -v gives each the same frame as its plain patch, 2026-12-06).
    "gpuobs_block_trace_enter_duty": 4,
    "gpuobs_block_trace_exit_duty": 0,
    "gpuobs_block_starts_enter_duty": 0,
    "gpuobs_mem_access_duty": 6,
}


def test_hot_patches_keep_their_saves():
    try:
        tc = find_toolchain()
    except NativeUnavailable as exc:
        pytest.skip(str(exc))
    if not (shutil.which("cuobjdump") or (Path(tc.nvcc).parent / "cuobjdump").exists()):
        pytest.skip("cuobjdump not found")
    rows = {r["function"]: r for r in patch_sass.report(patch_sass.sass("90"))}
    for name, most in MOST_STACK_OPS.items():
        assert name in rows, f"{name} is not in the compiled patches"
        assert rows[name]["stack_ops"] <= most, (
            f"{name}: {rows[name]['stack_ops']} stack stores/loads in its code, at most {most} as measured"
        )
