"""Loading, `stats`, `export` and `trim` of long runs: recordings with a flush at
every quiet synchronisation (synthetic.write_many_flush_recording), at growing
flush counts. Loading was quadratic in the flush count (each FLUSH rescanned
every earlier LAUNCHES part: 63 s at 8,000 flushes); it must stay linear, and
the soak's 12,000 flushes must load in seconds. Exits 1 when a limit is broken.

Then one large flush: loading checks every event's values and sorts the block
events once (the overlap check), so its cost is measured on a big recording too.

    python benchmarks/load_scale.py [--flushes 1000,2000,4000,8000,12000] [--max-load-s 5] [--big-launches 4096]
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import measure  # noqa: E402

from gpuobs.recording_file import synthetic  # noqa: E402

LOAD = "import sys, gpuobs; r = gpuobs.load(sys.argv[1]); print(len(r.flushes))"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flushes", default="1000,2000,4000,8000,12000")
    ap.add_argument("--max-load-s", type=float, default=5.0, help="limit on loading the largest")
    ap.add_argument("--big-launches", type=int, default=4096, help="launches of 1,024 blocks in the large recording")
    ap.add_argument(
        "--commands",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time stats, export and trim on the largest",
    )
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    counts = [int(n) for n in args.flushes.split(",")]
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        print("| flushes | file MB | load s | load peak MB |")
        print("|---|---|---|---|")
        for n in counts:
            path = Path(tmp) / f"long{n}.gpuobs"
            synthetic.write_many_flush_recording(path, n)
            run = measure([sys.executable, "-c", LOAD, str(path)], env)
            assert run.returncode == 0 and run.output.strip() == str(n), run.output
            print(f"| {n:,} | {path.stat().st_size / 1e6:.1f} | {run.seconds:.2f} | {run.peak_mb:.0f} |", flush=True)
        if run.seconds > args.max_load_s:
            failed.append(f"loading {n:,} flushes took {run.seconds:.1f} s (limit {args.max_load_s} s)")
        if args.commands:
            print(f"\n| command on {n:,} flushes | s | peak MB |")
            print("|---|---|---|")
            for name, cmd in (
                ("info", ["info", str(path)]),
                ("stats", ["stats", str(path)]),
                ("export", ["export", str(path), "-o", str(Path(tmp) / "t.pftrace")]),
                ("trim (all windows)", ["trim", str(path), "-o", str(Path(tmp) / "t.gpuobs"), "--flushes", "0:"]),
            ):
                run = measure([sys.executable, "-m", "gpuobs", *cmd], env)
                ok = "" if run.returncode == 0 else f" (exit {run.returncode})"
                print(f"| {name}{ok} | {run.seconds:.2f} | {run.peak_mb:.0f} |", flush=True)
        if args.big_launches:
            path = Path(tmp) / "big.gpuobs"
            # Written by another process: a child forked from a large parent would count the
            # parent's pages in its peak memory.
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from gpuobs.recording_file import synthetic; "
                    "synthetic.write_block_trace_recording(sys.argv[1], n_launches=int(sys.argv[2]), "
                    "blocks_per_launch=1024)",
                    str(path),
                    str(args.big_launches),
                ],
                env=env,
                check=True,
            )
            run = measure([sys.executable, "-c", LOAD, str(path)], env)
            print(
                f"\nload of {args.big_launches * 1024:,} block events in one flush "
                f"({path.stat().st_size / 1e6:.0f} MB):"
                f" {run.seconds:.2f} s, {run.peak_mb:.0f} MB peak",
                flush=True,
            )
    for line in failed:
        print(f"LIMIT BROKEN: {line}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
