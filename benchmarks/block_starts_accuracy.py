"""block_starts against the truth: how tight its block-end bounds are, and whether any is early.

Part 1 (--truth): tests/gpu_programs/warp_slots (kernels whose every warp times
itself and reads its SM and %warpid) recorded under `gpuobs record --mode
block_starts`; every recorded block is matched to the block's own reads:
its SM, the slots its warps took (the recorded mask), and its true end (the
last warp's last %globaltimer read) against the bound gpuobs gives it.

Part 2 (--workloads): real kernels (benchmarks/workloads.py: PyTorch silu*mul,
cuBLAS, SDPA, the graph decode step) recorded in separate runs under
block_trace (measured ends) and block_starts (bounded ends); per kernel, the
block durations each mode shows.

    python3 benchmarks/block_starts_accuracy.py --truth --workloads [--scale N] [--json F]
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import warp_slot_study  # noqa: E402

import gpuobs  # noqa: E402
from gpuobs.analysis import block_ends  # noqa: E402
from gpuobs.analysis import launches as launch_analysis  # noqa: E402
from gpuobs.recording_file import schema  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ["torch_silu_mul", "cublas_4096_bf16", "sdpa", "decode_step_graph"]


def record(out: Path, mode: str, cmd: list, env=None) -> "gpuobs.Recording":
    proc = subprocess.run(
        [sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(out), "--", *cmd],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed: {proc.stderr[-3000:]}")
    print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "", file=sys.stderr)
    return gpuobs.load(out)


def percentiles(values) -> dict:
    return warp_slot_study.percentiles(np.asarray(values, dtype=np.float64))


def truth_of_blocks(rows: np.ndarray) -> dict:
    """Per block of one shape: SM, slot mask, warp 0's start, true end (last warp's last read)."""
    rows = rows[rows["grid"] != 0]
    blocks, block_of = np.unique(rows["block"], return_inverse=True)
    mask = np.zeros(len(blocks), np.uint64)
    np.bitwise_or.at(mask, block_of, np.uint64(1) << rows["slot_first"].astype(np.uint64))
    end = np.zeros(len(blocks), np.uint64)
    np.maximum.at(end, block_of, rows["t_last"])
    sm = np.zeros(len(blocks), np.int64)
    sm[block_of] = rows["sm"]
    return {"grid": int(rows["grid"][0]), "block": blocks, "mask": mask, "end": end, "sm": sm}


def compare_with_truth(rec, shapes: dict) -> dict:
    """Every block of every shape recorded once, on its SM, with its warps' slots,
    and a bound no earlier than its true end; bound - true end per shape."""
    ends = block_ends.block_end_bounds(rec)
    ev = rec.events
    blocks = ev["kind"] == schema.EventKind.BLOCK
    out = {}
    for name, rows in shapes.items():
        t = truth_of_blocks(rows)
        mine = np.flatnonzero(blocks & (ev["grid_id"] == t["grid"]))
        order = mine[np.argsort(ev["block_x"][mine], kind="stable")]
        recorded_blocks = ev["block_x"][order].astype(np.uint64)
        found = np.isin(t["block"], recorded_blocks)
        dup = len(recorded_blocks) - len(np.unique(recorded_blocks))
        at = np.searchsorted(recorded_blocks, t["block"][found])
        idx = order[at]
        pos = ends.at(idx)
        bound = ends.end_bound_ns[pos].astype(np.int64)
        quality = ends.quality[pos]
        gap = bound - t["end"][found].astype(np.int64)
        bounded = quality != block_ends.EndBound.NONE
        by_quality = {}
        for q in block_ends.EndBound:
            sel = quality == q
            if sel.any():
                g = gap[sel & bounded]
                by_quality[q.name.lower()] = {
                    "blocks": int(sel.sum()),
                    "bound_minus_end_ns": percentiles(g),
                    "within_2us": float((g <= 2000).mean()) if g.size else None,
                }
        g = gap[bounded]
        out[name] = {
            "blocks": int(len(t["block"])),
            "recorded": int(found.sum()),
            "duplicates": int(dup),
            "sm_mismatch": int((ev["sm_id"][idx] != t["sm"][found]).sum()),
            "mask_mismatch": int((ev["address"][idx] != t["mask"][found]).sum()),
            "slots_incomplete": int(((ev["flags"][idx] & block_ends.SLOTS_INCOMPLETE) != 0).sum()),
            "bound_before_true_end": int((g < 0).sum()),
            "bound_minus_end_ns": percentiles(g),
            "within_2us": float((g <= 2000).mean()) if g.size else None,
            "by_quality": by_quality,
        }
    return out


def truth_part(scale: int, workdir: Path) -> dict:
    exe = warp_slot_study.build(workdir)
    truth_dir = workdir / "truth"
    truth_dir.mkdir()
    rec = record(workdir / "warp_slots.gpuobs", "block_starts", [str(exe), str(truth_dir), str(scale)])
    shapes = {p.stem: np.fromfile(p, dtype=warp_slot_study.WARP_ROW) for p in sorted(truth_dir.glob("*.warps"))}
    return compare_with_truth(rec, shapes)


def durations_by_kernel(rec, bounded: bool) -> dict:
    """Per kernel name: block durations (end - start), measured (block_trace) or
    to the bound (block_starts), with the share of blocks each bound kind has."""
    ev = rec.events
    blocks = np.flatnonzero(ev["kind"] == schema.EventKind.BLOCK)
    launch_of_event = launch_analysis.launch_index_of_events(rec)  # found once, used three times
    if bounded:
        ends = block_ends.block_end_bounds(rec, launch_of_event)
        pos = ends.at(blocks)
        dur = ends.end_bound_ns[pos].astype(np.int64) - ev["time_start"][blocks].astype(np.int64)
        quality = ends.quality[pos]
        ok = quality != block_ends.EndBound.NONE
    else:
        dur = ev["time_end"][blocks].astype(np.int64) - ev["time_start"][blocks].astype(np.int64)
        quality = None
        ok = ev["time_end"][blocks] != 0
    table = launch_analysis.launch_table(rec, launch_of_event)
    names = np.array([table.name[i] if i >= 0 else "?" for i in launch_of_event[blocks]], dtype=object)
    out = {}
    for name in sorted(set(names)):
        sel = (names == name) & ok
        row = {"blocks": int((names == name).sum()), "duration_ns": percentiles(dur[sel])}
        if quality is not None:
            row["bound"] = {
                block_ends.LABELS[q]: int(((names == name) & (quality == q)).sum()) for q in block_ends.EndBound
            }
        out[name[:80]] = row
    return out


def workloads_part(workdir: Path) -> dict:
    out = {}
    for w in WORKLOADS:
        cmd = [sys.executable, str(ROOT / "benchmarks" / "workloads.py"), "--only", w, "--reps", "3"]
        trace = durations_by_kernel(record(workdir / f"{w}.trace.gpuobs", "block_trace", cmd), bounded=False)
        starts = durations_by_kernel(record(workdir / f"{w}.starts.gpuobs", "block_starts", cmd), bounded=True)
        out[w] = {"block_trace": trace, "block_starts": starts}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", action="store_true")
    ap.add_argument("--workloads", action="store_true")
    ap.add_argument("--scale", type=int, default=1, help="divide the truth program's big shapes by this")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.truth:
            results["truth"] = truth_part(args.scale, tmp)
        if args.workloads:
            results["workloads"] = workloads_part(tmp)
    warp_slot_study.report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
