"""How long `gpuobs plot` takes on the shipped sample, and where the time goes.

Runs the command RUNS times, each a fresh process as a user runs it (wall time: min and
median), then once more in one process timed phase by phase: importing the CLI, loading
the recording, the per-kernel analysis, importing matplotlib, and drawing and writing
the image. On a shared machine the minimum is the figure to compare; the median shows
the noise.

    python benchmarks/plot_speed.py [--runs 5] [RECORDING]
"""

from __future__ import annotations

import argparse
import json
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.png"
        walls = []
        for _ in range(args.runs):
            t = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "gpuobs", "plot", args.recording, "-o", str(out), "-f"],
                check=True,
                capture_output=True,
            )
            walls.append(time.perf_counter() - t)
        phases = subprocess.run(
            [sys.executable, "-c", PHASES, args.recording, str(out)], check=True, capture_output=True, text=True
        )
    print(f"gpuobs plot {Path(args.recording).name}: {args.runs} runs, wall s")
    print(f"  min {min(walls):.2f}  median {statistics.median(walls):.2f}  max {max(walls):.2f}")
    print("in one process, s:")
    for name, s in json.loads(phases.stdout.strip().splitlines()[-1]).items():
        print(f"  {s:6.3f}  {name}")


if __name__ == "__main__":
    main()
