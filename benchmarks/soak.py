"""Soak: a graph-replayed decode loop under block_trace for a long time, with a
flush at every step's synchronise. Every `--every` seconds the worker logs its
host memory (RSS), the GPU memory in use, the recording's size and the step time
(device time of the replay, CUDA events) of the last interval. The summary
compares the first interval after warm-up with the last.

    python benchmarks/soak.py --seconds 600 --out soak.jsonl   (on a GPU machine)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def worker(args) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from decode_graph import build, capture

    model, tokens, pos = build(args.layers)
    graph, out = capture(model, tokens, pos)
    output = Path(os.environ.get("GPUOBS_OUTPUT", ""))
    start = time.time()
    next_log, steps, times = start + args.every, 0, []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    period = 1.0 / args.rate
    while True:
        t = time.time()
        begin.record()
        graph.replay()
        end.record()
        tokens.copy_(out)
        pos.add_(1)
        if steps % 800 == 799:
            pos.fill_(128)  # stay inside the KV cache
        torch.cuda.synchronize()  # a serving loop reads its next tokens: the tool flushes here
        times.append(begin.elapsed_time(end))
        steps += 1
        now = time.time()
        if now >= next_log:
            free, total = torch.cuda.mem_get_info()
            print(
                json.dumps(
                    {
                        "t": round(now - start, 1),
                        "steps": steps,
                        "step_ms": statistics.median(times),
                        "rss_mb": round(rss_mb(), 1),
                        "gpu_used_mb": round((total - free) / 2**20, 1),
                        "recording_mb": round(output.stat().st_size / 2**20, 2) if output.exists() else 0,
                    }
                ),
                flush=True,
            )
            times = []
            next_log += args.every
            if now - start >= args.seconds:
                break
        time.sleep(max(0.0, period - (time.time() - t)))


def summarise(rows: list, warmup: float) -> dict:
    after = [r for r in rows if r["t"] > warmup]
    first, last = after[0], after[-1]
    span_s = last["t"] - first["t"]
    steps = last["steps"] - first["steps"]
    return {
        "duration_s": rows[-1]["t"],
        "steps": rows[-1]["steps"],
        "rss_mb_first_last": [first["rss_mb"], last["rss_mb"]],
        "gpu_used_mb_first_last": [first["gpu_used_mb"], last["gpu_used_mb"]],
        "step_ms_first_last": [round(first["step_ms"], 4), round(last["step_ms"], 4)],
        "step_ms_max_interval": round(max(r["step_ms"] for r in after), 4),
        "recording_mb_per_1000_steps": round((last["recording_mb"] - first["recording_mb"]) / max(steps, 1) * 1000, 3),
        "recording_mb_end": last["recording_mb"],
        "after_warmup_s": span_s,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--every", type=float, default=20)
    p.add_argument("--rate", type=float, default=20, help="decode steps per second (a serving loop's pace)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--warmup", type=float, default=60)
    p.add_argument("--out", default="soak.jsonl")
    p.add_argument("--recording", default="soak.gpuobs")
    p.add_argument("--worker", action="store_true")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    cmd = [
        sys.executable,
        "-m",
        "gpuobs",
        "record",
        "--force",
        "--mode",
        "block_trace",
        "-o",
        args.recording,
        "--",
        sys.executable,
        __file__,
        "--worker",
        "--seconds",
        str(args.seconds),
        "--every",
        str(args.every),
        "--rate",
        str(args.rate),
        "--layers",
        str(args.layers),
    ]
    rows = []
    with open(args.out, "w") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            if line.startswith("{"):
                rows.append(json.loads(line))
                log.write(line)
                log.flush()
                print(line.strip(), flush=True)
    print("exit status", proc.returncode)
    print("SOAK_SUMMARY " + json.dumps(summarise(rows, args.warmup)))
    # The recording's own accounting over the whole soak, flush by flush (reading
    # the counters only: resolving every block to its launch is not needed here).
    import gpuobs

    rec = gpuobs.load(args.recording)
    f = rec.flushes
    balanced = f["attempted"] == f["recorded"] + f["dropped"]
    print(
        "SOAK_RECORDING "
        + json.dumps(
            {
                **rec.totals,
                "launches": len(rec.launches),
                "flushes": len(f),
                "flushes_balanced": int(balanced.sum()),
                "complete": rec.complete,
            }
        )
    )


if __name__ == "__main__":
    main()
