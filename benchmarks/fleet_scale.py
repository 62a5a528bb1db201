"""Analysis at fleet scale (issue 35): time and peak RSS of `info`, `stats`, the
Perfetto export (whole and a 10 ms window), `trim`, the Parquet export, a DuckDB
per-kernel summary over it, and `diff` of a recording with itself, on synthetic
block_trace recordings of growing size (recording_file/synthetic.py: 132 SMs, one
flush, 1,024-block launches of three kernels), each command its own process.

    python benchmarks/fleet_scale.py [--blocks 1M,4M] [--keep DIR] [--skip-perfetto] [--steps info,stats]
                                     [--before DIR]

--before DIR also runs each step with the gpuobs of another checkout (e.g. `git worktree
add /tmp/before main`), one after the other on the same recording, for a before/after
table measured side by side. Prints a Markdown table for docs/benchmarks.md."""

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import measure  # noqa: E402

BLOCKS_PER_LAUNCH = 1024
KERNEL_SUMMARY = (
    'import duckdb, sys; print(duckdb.sql("SELECT kernel, sum(span_ns), count(*), median(span_ns) FROM '
    "read_parquet('\" + sys.argv[1] + \"/launches/*/*/*.parquet') WHERE blocks_recorded > 0 "
    'GROUP BY kernel").fetchall())'
)
BLOCKS_SUMMARY = (
    'import duckdb, sys; print(duckdb.sql("SELECT kernel, count(*), count(DISTINCT sm), '
    "quantile_cont(end_ns - start_ns, 0.5) FROM read_parquet('\" + sys.argv[1] + \"/blocks/*/*/*.parquet') "
    'GROUP BY kernel").fetchall())'
)


def _count(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


def make(path: Path, blocks: int) -> None:
    """The recording, written by a child process (generating it takes memory of its own)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[3]); from gpuobs.recording_file import synthetic; "
        "synthetic.write_block_trace_recording(sys.argv[1], n_launches=int(sys.argv[2]) // 1024, "
        "blocks_per_launch=1024)"
    )
    run = measure([sys.executable, "-c", code, str(path), str(blocks), str(ROOT / "exporter")])
    if run.returncode:
        raise SystemExit(f"making the {blocks:,}-block recording failed:\n{run.output}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", default="1M,4M", help="comma-separated sizes (K, M suffixes)")
    ap.add_argument("--keep", type=Path, help="keep the recordings and outputs in this folder")
    ap.add_argument("--skip-perfetto", action="store_true", help="leave out the two Perfetto exports")
    ap.add_argument("--steps", help="only the steps whose name starts with one of these (comma-separated)")
    ap.add_argument("--before", type=Path, help="a checkout whose gpuobs runs each step too, for comparison")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="gpuobs-fleet-"))
    folder.mkdir(parents=True, exist_ok=True)
    versions = [("", dict(os.environ, PYTHONPATH=str(ROOT / "exporter")))]
    if args.before:
        versions.insert(0, ("before: ", dict(os.environ, PYTHONPATH=str(args.before.resolve() / "exporter"))))
    wanted = [w.strip() for w in args.steps.split(",")] if args.steps else None
    gpuobs = [sys.executable, "-m", "gpuobs"]
    print("| blocks | .gpuobs | step | time (s) | CPU (s) | peak RSS (MB) | output |")
    print("|---|---|---|---|---|---|---|")
    try:
        for blocks in [_count(b) for b in args.blocks.split(",")]:
            rec = folder / f"synthetic_{blocks}.gpuobs"
            if not rec.exists():
                make(rec, blocks)
            size = f"{rec.stat().st_size / 1e6:.0f} MB"
            pq = folder / f"synthetic_{blocks}.parquet"
            steps = [
                ("info", gpuobs + ["info", rec], None),
                ("stats", gpuobs + ["stats", rec, "--top", "3"], None),
            ]
            if not args.skip_perfetto:
                steps += [
                    ("export (Perfetto)", gpuobs + ["export", rec, "-o", folder / "t.pftrace", "-f"], "t.pftrace"),
                    (
                        "export --time-window 0ms:10ms",
                        gpuobs + ["export", rec, "--time-window", "0ms:10ms", "-o", folder / "w.pftrace", "-f"],
                        "w.pftrace",
                    ),
                ]
            steps += [
                (
                    "trim --time 0ms:10ms",
                    gpuobs + ["trim", rec, "--time", "0ms:10ms", "-o", folder / "p.gpuobs", "-f"],
                    "p.gpuobs",
                ),
                ("export --format parquet", gpuobs + ["export", rec, "--format", "parquet", "-o", pq, "-f"], pq.name),
                ("DuckDB kernel summary (launches)", [sys.executable, "-c", KERNEL_SUMMARY, pq], None),
                ("DuckDB blocks summary (blocks)", [sys.executable, "-c", BLOCKS_SUMMARY, pq], None),
                ("diff A A", gpuobs + ["diff", rec, rec], None),
            ]
            for (name, cmd, output), (label, env) in ((step, version) for step in steps for version in versions):
                if wanted and not any(name.startswith(w) for w in wanted):
                    continue
                run = measure([str(c) for c in cmd], env=env)
                if run.returncode:
                    raise SystemExit(f"{label}{name} failed ({run.returncode}):\n{run.output[-2000:]}")
                shown = ""
                if output:
                    target = folder / output
                    total = (
                        sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
                        if target.is_dir()
                        else target.stat().st_size
                    )
                    shown = f"{total / 1e6:.1f} MB"
                print(
                    f"| {blocks / 1e6:g}M | {size} | {label}{name} | {run.seconds:.2f} | {run.cpu_seconds:.2f} | "
                    f"{run.peak_mb:.0f} | {shown} |",
                    flush=True,
                )
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
