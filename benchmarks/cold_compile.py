"""A cold torch.compile (max-autotune) + Triton + cuDNN program, with no tool and
under a block mode at default settings, side by side: wall time, the tool's
device memory, and what the recording holds (blocks attempted, recorded,
dropped; launches whose blocks are not all there).

    python benchmarks/cold_compile.py [--modes block_trace,block_counter] [--rounds 1] [--max-autotune]

Each run gets a fresh compile cache, so each one autotunes from cold."""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "gpu_programs" / "cold_compile.py"
sys.path.insert(0, str(ROOT / "exporter"))
from gpuobs import load  # noqa: E402
from gpuobs.analysis import launches as analysis  # noqa: E402


def check(rec_path: Path) -> dict:
    """What a recording of the program holds: the accounting, and launches whose
    blocks are not all recorded (block_trace, block_starts) or counted."""
    rec = load(rec_path)
    s = analysis.summary(rec)
    table = analysis.launch_table(rec)
    host = (rec.launches["flags"] & 4) == 0  # launched by the host: its grid is known
    out = {k: s[k] for k in ("launches", "counted", "attempted", "recorded", "dropped", "incomplete", "flushes")}
    out["sampled_out"] = rec.totals["sampled_out"]  # the data budget's (--budget)
    out["blocks"] = int(table.grid_blocks[host].sum())
    if s["attempted"]:
        out["launches_missing_blocks"] = int((table.blocks_recorded[host] < table.grid_blocks[host]).sum())
    exact = (table.counted == table.grid_blocks) & (table.counted_shared == 1)
    out["launches_count_not_exact"] = int((~exact[host]).sum())
    out["launches_without_slice"] = int((table.blocks_recorded[host] == 0).sum()) if s["attempted"] else None
    return out


def run(mode: str, work: Path, max_autotune: bool = False, record_args: tuple = ()) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    cmd = [sys.executable, str(PROGRAM), str(cache), *(["--max-autotune"] if max_autotune else [])]
    rec = work / f"{mode}.gpuobs"
    if mode != "none":
        rec.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(rec), *record_args, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    result["rc"] = proc.returncode
    if proc.returncode != 0 or not lines:
        result["stderr"] = proc.stderr[-1500:]
    if mode != "none" and rec.exists():
        result["recording"] = check(rec)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--modes", default="block_trace")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--max-autotune", action="store_true", help="compile with max-autotune (GEMM template benchmarks)")
    a = p.parse_args()
    modes = ["none", *a.modes.split(",")]
    results = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for mode in modes:
                res = run(mode, Path(tmp), a.max_autotune)
                results[mode].append(res)
                print(f"round {r} {mode}: {json.dumps(res)}", flush=True)
    base = results["none"][-1]
    print("\n| mode | wall s | tool device MiB | recording |\n|---|---|---|---|")
    for mode in modes:
        res = results[mode][-1]
        mem = (res.get("device_used_bytes", 0) - base.get("device_used_bytes", 0)) / 2**20 if mode != "none" else 0
        print(f"| {mode} | {res.get('wall_s', float('nan')):.1f} | {mem:.0f} | {res.get('recording', '')} |")


if __name__ == "__main__":
    main()
