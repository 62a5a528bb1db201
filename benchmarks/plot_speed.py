"""How long `gpuobs plot` takes on the shipped sample, and where the time goes.

Runs the command RUNS times, each a fresh process as a user runs it (wall time: min and
median), then once more in one process timed phase by phase: importing the CLI, loading
the recording, the per-kernel analysis, importing matplotlib, and drawing and writing
the image. On a shared machine the minimum is the figure to compare; the median shows
the noise. With --against TREE (another checkout, e.g. `git worktree add /tmp/main main`)
its gpuobs runs too, alternating with this one run by run, so both see the same load.

    python benchmarks/plot_speed.py [--runs 5] [--against TREE] [RECORDING]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "data" / "decode_block_trace.gpuobs"

PHASES = r"""
import json, sys, time
from pathlib import Path
laps, t = {}, time.perf_counter()
ANALYSIS = "per-kernel analysis (as plot() runs it)"
def lap(name):
    global t
    now = time.perf_counter(); laps[name] = round(now - t, 3); t = now
import gpuobs.cli
lap("import gpuobs.cli (typer, rich, gpuobs)")
import gpuobs
rec = gpuobs.load(sys.argv[1])
lap("load the recording")
from gpuobs.analysis import launches
of = launches.launch_index_of_events(rec)
launches.kernel_stats(rec, of, launches.launch_table(rec, of))
lap("per-kernel analysis (as plot() runs it)")
import matplotlib.figure, matplotlib.ticker
lap("import matplotlib.figure")
from gpuobs.analysis.plot import plot
plot(rec, {0: Path(sys.argv[2])}, force=True)
lap("plot()")
laps["draw and write the PNG (plot() less the analysis)"] = round(laps.pop("plot()") - laps[ANALYSIS], 3)
print(json.dumps(laps))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", nargs="?", default=str(SAMPLE))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--against", metavar="TREE", help="another checkout whose gpuobs runs alternately with this one")
    args = ap.parse_args()
    envs = {"this": dict(os.environ)}
    if args.against:
        envs[args.against] = dict(os.environ, PYTHONPATH=str(Path(args.against).resolve() / "exporter"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.png"
        walls = {name: [] for name in envs}
        for _ in range(args.runs):
            for name, env in envs.items():
                t = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "gpuobs", "plot", args.recording, "-o", str(out), "-f"],
                    check=True,
                    capture_output=True,
                    env=env,
                )
                walls[name].append(time.perf_counter() - t)
        phases = subprocess.run(
            [sys.executable, "-c", PHASES, args.recording, str(out)], check=True, capture_output=True, text=True
        )
    print(f"gpuobs plot {Path(args.recording).name}: {args.runs} runs each, wall s")
    for name, w in walls.items():
        print(f"  {name}: min {min(w):.2f}  median {statistics.median(w):.2f}  max {max(w):.2f}")
    print("this, in one process, s:")
    for name, s in json.loads(phases.stdout.strip().splitlines()[-1]).items():
        print(f"  {s:6.3f}  {name}")


if __name__ == "__main__":
    main()
