"""`info`, `stats`, `export` and `trim` must grow with the recording, not faster:
one grouped pass over events, launches, flush windows and kernels. `info` once
scanned every event per flush window (10k windows of 1M events: 55 s) and `stats`
every event per kernel (50k kernels: 143 s); shortening one long kernel name was
cubic in its length. Recordings of N events in one of two shapes:

  windows  N/100 flush windows of 2 launches of 50 blocks (3 kernels)
  kernels  N/20 kernels, each launched once with 20 blocks, in one flush

For each shape, the command is timed at N/4 and at N (the file format holds at
most 65,536 kernels, so 4x of 50k kernels cannot be written): the targets are
`info` and `stats` within --max-s at N = 1M, and N within --max-ratio times N/4.
Then kernel-name shortening at growing name lengths. Exits 1 when a target is missed.

    python benchmarks/analysis_scale.py [--events 1000000] [--commands info,stats,export,trim] [--max-s 3]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import measure  # noqa: E402

from gpuobs.recording_file import schema, synthetic  # noqa: E402
from gpuobs.recording_file.recording_writer import RecordingWriter  # noqa: E402

COMMANDS = {
    "info": ["info", "{rec}"],
    "stats": ["stats", "{rec}"],
    "export": ["export", "{rec}", "-o", "{tmp}/t.pftrace", "-f"],
    "trim": ["trim", "{rec}", "--flushes", "0:", "-o", "{tmp}/t.gpuobs", "-f"],
}


def write_many_kernels(path, kernels: int, blocks_per_launch: int = 20, sm_count: int = 132):
    """`kernels` kernels (one function slot each), each launched once, in one flush."""
    ev, launches = synthetic.block_trace_events(kernels, blocks_per_launch, sm_count)
    slots = np.arange(kernels, dtype=np.uint32)
    launches["function_slot"] = slots
    ev["function_slot"] = slots[ev["grid_id"] - 1000]
    ev["thread_index"] = ev["exit_count"] = 128
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 20, argv=["python3", "many.py"])
        w.device(sm_count=sm_count)
        w.module(module_id=1)
        for slot in range(kernels):
            w.function(function_slot=slot, mangled=f"_Z8kernel{slot}v", demangled=f"void ns::kernel_{slot}<{slot}>()")
        w.launches(launches)
        counts = synthetic.whole_launch_counts(launches, blocks_per_launch)
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0, launch_counts=counts)
        w.events(ev)
        w.end(flushes=1, launches=kernels, events=len(ev))
    return path


def write_shape(path, shape: str, events: int):
    if shape == "windows":
        return synthetic.write_many_flush_recording(path, events // 100, launches_per_flush=2, blocks_per_launch=50)
    return write_many_kernels(path, events // 20)


def name_of_length(n: int) -> str:
    """A CuTe-like name: nested and side-by-side template arguments, about n characters."""
    part = "cute::tuple<cute::C<{i}>, cute::Layout<cute::Shape<cute::Int<{i}>, cute::_1>>>"
    pieces, length, i = [], 0, 0
    while length < n:
        pieces.append(part.format(i=i))
        length += len(pieces[-1]) + 2
        i += 1
    return "void cutlass::device_kernel<" + ", ".join(pieces) + ">(Params)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--commands", default="info,stats,export,trim")
    ap.add_argument("--shapes", default="windows,kernels")
    ap.add_argument("--max-s", type=float, default=3.0, help="limit for info and stats at --events")
    ap.add_argument("--max-ratio", type=float, default=4.4, help="limit on time at 4x events / time at 1x")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        print("| shape | events | windows | kernels | command | s | peak MB |")
        print("|---|---|---|---|---|---|---|")
        for shape in args.shapes.split(","):
            took = {}
            for events in (args.events // 4, args.events):
                rec = Path(tmp) / f"{shape}{events}.gpuobs"
                write_shape(rec, shape, events)
                windows = events // 100 if shape == "windows" else 1
                kernels = 3 if shape == "windows" else events // 20
                for name in args.commands.split(","):
                    cmd = [a.replace("{rec}", str(rec)).replace("{tmp}", tmp) for a in COMMANDS[name]]
                    run = measure([sys.executable, "-m", "gpuobs", *cmd], env)
                    if run.returncode != 0:
                        failed.append(f"{name} on {rec.name} exited {run.returncode}: {run.output[-500:]}")
                    took[name, events] = run.seconds
                    print(
                        f"| {shape} | {events:,} | {windows:,} | {kernels:,} | {name} | {run.seconds:.2f} "
                        f"| {run.peak_mb:.0f} |",
                        flush=True,
                    )
                rec.unlink()
            for name in args.commands.split(","):
                small, big = took[name, args.events // 4], took[name, args.events]
                if name in ("info", "stats") and big > args.max_s:
                    failed.append(f"{name} ({shape}, {args.events:,} events) took {big:.2f} s (limit {args.max_s})")
                if big > args.max_ratio * small:
                    failed.append(f"{name} ({shape}): 4x the events took {big / small:.1f}x the time")

    from gpuobs.analysis.kernel_names import short_name

    print("\n| name characters | short_name ms |")
    print("|---|---|")
    took = []
    for n in (4_000, 16_000, 64_000):
        name = name_of_length(n)
        began = time.perf_counter()
        short_name(name)
        took.append(time.perf_counter() - began)
        print(f"| {len(name):,} | {took[-1] * 1000:.1f} |")
    if took[-1] > 16 * 4.4 * max(took[0], 1e-3):
        failed.append(f"short_name: 16x the length took {took[-1] / took[0]:.0f}x the time")
    for f in failed:
        print("FAILED:", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
