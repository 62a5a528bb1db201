"""Serving-rate recording: a graph-replayed decode loop (Qwen3-shaped, 8 layers,
hidden 2048, batch 32, static KV cache, one CUDA graph per step) replayed back to
back with no synchronisation among the replays, as a server with asynchronous
scheduling queues them, under each configuration side by side (rounds alternate).

    python benchmarks/serving_rate.py --replays 600 --rounds 2 \\
        --configs none,block_noop,block_trace,block_trace@8192,block_starts,block_starts@8192

MODE@MiB runs MODE with --device-memory MiB (a ring that holds the whole run);
MODE+lossless with --lossless; MODE+paused with --paused (the whole run outside
recording windows: the record gate's disarmed cost); MODE+budgetN with --budget N
(MB/s; budget0: none, the sampler off; without it, the default budget);
MODE%ON/PERIOD with a duty cycle recording ON ms of every PERIOD ms; --sync-every-step adds a
synchronisation per step (the classic serving loop). Per configuration: device ms per step (events around
the whole loop), the ratio to no tool and to MODE+budget0@8192 (else MODE@8192), the waits the tool made
(its PROGRAM_WAITED line), what each flush attempted, recorded, dropped and sampled out, and
how long its drain stages and its cuts took (GPUOBS_DEBUG lines), the recording's size, and
how long `gpuobs record` took to finish after the program's last line.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLUSH_LINE = re.compile(
    r"flush \d+ \((?P<reason>[^)]*)\): attempted (?P<attempted>\d+) recorded (?P<recorded>\d+) "
    r"dropped (?P<dropped>\d+)(?: sampled out (?P<sampled_out>\d+))? kept (?P<kept>\d+); "
    r"cut (?P<cut_ago>[\d.]+) ms ago, drained in (?P<drain>[\d.]+) ms"
    r"(?: \(copy (?P<copy>[\d.]+), classify (?P<classify>[\d.]+), harvest (?P<harvest>[\d.]+), "
    r"write (?P<write>[\d.]+)\))?"
    r"(?:; the cut took (?P<cut>[\d.]+) ms \(claims (?P<cut_claims>[\d.]+), graph slots (?P<cut_slots>[\d.]+)\))?"
)
WAITED = re.compile(r"have waited (\d+) times so far, ([\d.]+) ms in all")


def worker(args) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from decode_graph import build, capture

    model, tokens, pos = build(args.layers, batch=args.batch, max_len=args.max_len, hidden=args.hidden)
    graph, out = capture(model, tokens, pos)
    for _ in range(5):  # warm: modules loaded and patched, the graph uploaded
        graph.replay()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    begin.record()
    for _ in range(args.replays):
        graph.replay()
        if args.sync_every_step:
            torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    host_s = time.perf_counter() - t0
    print(
        "SERVING "
        + json.dumps(
            {
                "ms_per_step": begin.elapsed_time(end) / args.replays,
                "host_s": host_s,
                "replays": args.replays,
                "exit_time": time.time(),
            }
        ),
        flush=True,
    )


def parse_config(text: str) -> dict:
    head, _, duty = text.partition("%")
    mode, _, rest = head.partition("@")
    flags = mode.split("+")
    on_ms, _, period_ms = duty.partition("/")
    return {
        "name": text,
        "mode": flags[0],
        "device_memory": int(rest) if rest else None,
        "lossless": "lossless" in flags,
        "paused": "paused" in flags,
        # +budgetN: --budget N (MB/s; 0: none); without it, the default budget
        "budget": next((f[len("budget") :] for f in flags if f.startswith("budget")), None),
        "duty_ms": (float(on_ms), float(period_ms)) if duty else None,
    }


def run_config(cfg: dict, args, workdir: Path) -> dict:
    worker_cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--replays",
        str(args.replays),
        "--layers",
        str(args.layers),
        "--hidden",
        str(args.hidden),
        "--batch",
        str(args.batch),
        "--max-len",
        str(args.max_len),
        *(["--sync-every-step"] if args.sync_every_step else []),
    ]
    out = workdir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', cfg['name'])}.gpuobs"
    if cfg["mode"] == "none":
        cmd = worker_cmd
    else:
        cmd = [sys.executable, "-m", "gpuobs", "record", "--force", "--mode", cfg["mode"], "-o", str(out)]
        if cfg["device_memory"]:
            cmd += ["--device-memory", str(cfg["device_memory"])]
        if cfg["lossless"]:
            cmd += ["--lossless"]
        if cfg["paused"]:
            cmd += ["--paused"]
        if cfg["budget"] is not None:
            cmd += ["--budget", cfg["budget"]]
        if cfg["duty_ms"]:
            cmd += ["--duty", f"{cfg['duty_ms'][0]}ms/{cfg['duty_ms'][1]}ms"]
        cmd += ["--", *worker_cmd]
    env = dict(__import__("os").environ, GPUOBS_DEBUG="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    done = time.time()
    line = next((x for x in proc.stdout.splitlines() if x.startswith("SERVING ")), None)
    if line is None:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    r = json.loads(line[len("SERVING ") :])
    r["finish_s"] = done - r.pop("exit_time")
    flushes = [m.groupdict() for m in FLUSH_LINE.finditer(proc.stderr)]
    for key in ("attempted", "recorded", "dropped", "sampled_out"):
        r[key] = sum(int(f[key] or 0) for f in flushes)
    r["flushes"] = len(flushes)
    for stage in ("drain", "copy", "classify", "harvest", "write", "cut", "cut_claims", "cut_slots"):
        r[f"{stage}_ms"] = round(sum(float(f[stage] or 0) for f in flushes), 1)
    waits = WAITED.findall(proc.stderr)
    r["waits"], r["waited_ms"] = (int(waits[-1][0]), float(waits[-1][1])) if waits else (0, 0.0)
    r["file_mb"] = round(out.stat().st_size / 2**20, 1) if out.exists() else 0
    (workdir / f"{out.stem}.stderr").write_text(proc.stderr)
    if out.exists() and not args.keep:
        out.unlink()
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--replays", type=int, default=600)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--sync-every-step", action="store_true")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--configs", default="none,block_trace,block_trace@8192,block_starts,block_starts@8192")
    p.add_argument("--workdir", default="", help="where recordings and tool logs go (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the recordings")
    p.add_argument("--json", default="", help="write every run's numbers here")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpuobs-serving-"))
    workdir.mkdir(parents=True, exist_ok=True)
    configs = [parse_config(c) for c in args.configs.split(",")]
    runs: dict = {c["name"]: [] for c in configs}
    for rnd in range(args.rounds):
        for cfg in configs:
            r = run_config(cfg, args, workdir)
            runs[cfg["name"]].append(r)
            print(f"round {rnd} {cfg['name']}: {json.dumps(r)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    med = {
        name: statistics.median(r["ms_per_step"] for r in rs if "ms_per_step" in r)
        for name, rs in runs.items()
        if any("ms_per_step" in r for r in rs)
    }
    base = med.get("none")
    print(
        f"\n{'config':<22} {'ms/step':>8} {'x none':>7} {'x big':>6} {'waits':>6} {'waited':>8} "
        f"{'recorded':>11} {'dropped':>11} {'sampled out':>12} {'file MB':>8} {'finish s':>8}"
    )
    for name, rs in runs.items():
        if name not in med:
            print(f"{name:<22} failed: {rs[-1].get('error', '')[:200]}")
            continue
        last = rs[-1]
        mode = parse_config(name)["mode"]
        # The reference: the same mode recording everything (no sampler, a ring that holds the run)
        big = med.get(f"{mode}+budget0@8192", med.get(f"{mode}@8192"))
        print(
            f"{name:<22} {med[name]:8.3f} {med[name] / base if base else float('nan'):7.2f} "
            f"{med[name] / big if big else float('nan'):6.2f} {last.get('waits', 0):6d} "
            f"{last.get('waited_ms', 0):8.0f} {last.get('recorded', 0):11,} {last.get('dropped', 0):11,} "
            f"{last.get('sampled_out', 0):12,} "
            f"{last.get('file_mb', 0):8.1f} {last.get('finish_s', 0):8.1f}"
        )


if __name__ == "__main__":
    main()
