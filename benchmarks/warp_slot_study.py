"""Warp-slot facts behind block_starts, from kernels that time themselves.

Runs tests/gpu_programs/warp_slots (every warp writes its SM, %warpid and
%globaltimer at its first and last instruction) and reports, per shape:
  - whether %warpid and %smid stay fixed for a warp's life;
  - whether a block's warps take consecutive slots (slot of warp w = slot of warp 0 + w);
  - whether every slot of a block is free before the block's first warp starts
    (the predecessor in each slot has read its last timer before warp 0's first);
  - the bound a block's end gets from the next block arriving in each of its slots
    (successor's warp-0 start), against the block's true end (its last warp's last read);
  - the same from its first warp's slot alone: what a record from the block's first
    warp only (no per-warp records) could bound, and how often that falls before the end.

    python3 benchmarks/warp_slot_study.py [--scale N] [--json out.json]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "gpu_programs" / "warp_slots.cu"

WARP_ROW = np.dtype(
    [
        ("grid", "<u8"),
        ("block", "<u8"),
        ("t_first", "<u8"),
        ("t_last", "<u8"),
        ("sm", "<u4"),
        ("slot_first", "<u4"),
        ("slot_last", "<u4"),
        ("warp_in_block", "<u4"),
        ("sm_last", "<u4"),
        ("pad", "<u4", 3),
    ]
)
assert WARP_ROW.itemsize == 64


def build(workdir: Path) -> Path:
    exe = workdir / "warp_slots"
    subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", str(exe), str(SOURCE)], check=True)
    return exe


def run(exe: Path, outdir: Path, scale: int) -> dict[str, np.ndarray]:
    lines = subprocess.run([str(exe), str(outdir), str(scale)], check=True, capture_output=True, text=True).stdout
    shapes = {}
    for line in lines.splitlines():
        name = line.split()[0]
        shapes[name] = np.fromfile(outdir / f"{name}.warps", dtype=WARP_ROW)
    return shapes


def percentiles(values: np.ndarray) -> dict:
    if values.size == 0:
        return {}
    p = np.percentile(values, [50, 90, 95, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p95": float(p[2]), "p99": float(p[3]), "max": float(values.max())}


def study(shapes: dict[str, np.ndarray], names: list[str]) -> dict:
    """Successors are looked for among all warps of `names` (kernels that ran
    together or one after another share slots); statistics are per shape."""
    rows = np.concatenate([shapes[n] for n in names])
    shape_of = np.concatenate([np.full(len(shapes[n]), i) for i, n in enumerate(names)])
    written = rows["grid"] != 0
    rows, shape_of = rows[written], shape_of[written]
    block_key = shape_of.astype(np.uint64) << np.uint64(40) | rows["block"]
    # The block's warp-0 start: what block_starts records per block.
    uniq, block_of = np.unique(block_key, return_inverse=True)
    leader_start = np.full(len(uniq), np.iinfo(np.uint64).max, dtype=np.uint64)
    np.minimum.at(leader_start, block_of[rows["warp_in_block"] == 0], rows["t_first"][rows["warp_in_block"] == 0])
    block_end = np.zeros(len(uniq), dtype=np.uint64)
    np.maximum.at(block_end, block_of, rows["t_last"])
    slot0 = np.zeros(len(uniq), dtype=np.int64)
    lead = rows["warp_in_block"] == 0
    slot0[block_of[lead]] = rows["slot_first"][lead]
    consecutive = rows["slot_first"].astype(np.int64) == slot0[block_of] + rows["warp_in_block"]

    order = np.lexsort((rows["t_first"], rows["slot_first"], rows["sm"]))
    r, b = rows[order], block_of[order]
    same_slot_next = (r["sm"][1:] == r["sm"][:-1]) & (r["slot_first"][1:] == r["slot_first"][:-1])
    # Predecessor check: the warp before in a slot has finished before this block's warp 0 started.
    pred_late = same_slot_next & (r["t_last"][:-1] > leader_start[b[1:]])
    # Bound per warp from the next block in its slot; per block the latest over its warps.
    has_succ = np.zeros(len(r), dtype=bool)
    has_succ[:-1] = same_slot_next
    succ_start = np.zeros(len(r), dtype=np.uint64)
    succ_start[:-1] = np.where(same_slot_next, leader_start[b[1:]], 0)
    bound = np.zeros(len(uniq), dtype=np.uint64)
    np.maximum.at(bound, b, succ_start)
    # The bound a block could get from its first warp's slot alone.
    lead_has = np.zeros(len(uniq), dtype=bool)
    lead_bound = np.zeros(len(uniq), dtype=np.uint64)
    lead_succ = has_succ & (r["warp_in_block"] == 0)
    lead_has[b[lead_succ]] = True
    lead_bound[b[lead_succ]] = succ_start[lead_succ]
    missing = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(missing, b, (~has_succ).astype(np.int64))
    covered = missing == 0

    out = {}
    block_shape = (uniq >> np.uint64(40)).astype(np.int64)
    for i, name in enumerate(names):
        mine = shape_of == i
        blocks = block_shape == i
        c = blocks & covered
        gap = (bound[c].astype(np.int64) - block_end[c].astype(np.int64)).astype(np.float64)
        lc = blocks & lead_has
        lead_gap = lead_bound[lc].astype(np.int64) - block_end[lc].astype(np.int64)
        out[name] = {
            "warps": int(mine.sum()),
            "blocks": int(blocks.sum()),
            "slot_changed": int((rows["slot_first"][mine] != rows["slot_last"][mine]).sum()),
            "sm_changed": int((rows["sm"][mine] != rows["sm_last"][mine]).sum()),
            "warps_not_consecutive": int((~consecutive[mine]).sum()),
            "predecessor_after_leader_start": int(pred_late[shape_of[order][1:] == i].sum()),
            "blocks_with_successor_in_every_slot": int(c.sum()),
            "bound_before_true_end": int((gap < 0).sum()),
            "bound_minus_end_ns": percentiles(gap),
            "within_2us": float((gap <= 2000).mean()) if gap.size else None,
            "blocks_with_successor_in_first_warps_slot": int(lc.sum()),
            "first_warps_slot_bound_before_true_end": int((lead_gap < 0).sum()),
            "first_warps_slot_bound_earliest_ns": int(lead_gap.min()) if lead_gap.size else None,
        }
    return out


def report(results: dict, json_path: Path | None) -> None:
    """Prints the results, and writes them to json_path too when given."""
    text = json.dumps(results, indent=1)
    print(text)
    if json_path:
        json_path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=1, help="divide the big shapes' block counts by this")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shapes = run(build(tmp), tmp, args.scale)
    results = {
        "each kernel alone": {n: study(shapes, [n])[n] for n in shapes if not n.startswith("mixed")},
        "mixed kernels together": study(shapes, ["mixed_a", "mixed_b"]),
        "whole run": study(shapes, list(shapes)),
    }
    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
