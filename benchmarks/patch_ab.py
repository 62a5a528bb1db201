"""A/B test of device-patch variants: the same mode and workloads under each
variant of gpuobs_patches.cu, side by side in one run (configurations alternate
round by round), with what each variant's recordings say about their data.

    python benchmarks/patch_ab.py --mode block_trace --only torch_silu_mul \\
        --variant base=device_patches/gpuobs_patches.cu --variant l1=/tmp/exit_l1.cu

Each variant is built with the project's own patch build command, so a change
can be predicted, tried and measured before it replaces the shipped source.
Prints, per workload, the median device ms, the ratio to no tool and to the
first variant, and per variant the recordings' accounting (attempted, dropped,
unmatched exit threads, unconfirmed ends)."""

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "exporter"))

from overhead_ladder import run_worker, worker_command  # noqa: E402  (same folder)

from gpuobs.record import native_build  # noqa: E402
from gpuobs.record.run import RecordOptions, tool_environment  # noqa: E402
from gpuobs.recording_file import reader  # noqa: E402


def build_variants(variants: dict, workdir: Path) -> dict:
    tc = native_build.find_toolchain()
    fatbins = {}
    for name, source in variants.items():
        out = workdir / f"{name}.fatbin"
        proc = subprocess.run(
            native_build.patch_compile_command(tc, out, source=Path(source)), capture_output=True, text=True
        )
        if proc.returncode != 0:
            sys.exit(f"variant {name} ({source}) does not build:\n{proc.stderr}")
        fatbins[name] = out
    return fatbins


def run_once(args, fatbin, output: Path) -> dict:
    env = None
    if fatbin is not None:
        opts = RecordOptions(
            mode=args.mode,
            sample_shift=args.sample_shift,
            output=output,
            capacity=args.capacity,
            graph_nodes="none" if args.no_graph_nodes else "learn",
            extra_env={"GPUOBS_PATCHES": str(fatbin)},
        )
        env = tool_environment(native_build.build(), opts)
    result = run_worker(worker_command(args.reps, args.only), env)
    if fatbin is not None and "_error" not in result:
        result["_totals"] = reader.load(output, salvage=True).totals
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", required=True)
    p.add_argument("--variant", action="append", required=True, help="NAME=path/to/patches.cu (first = baseline)")
    p.add_argument("--only", default="")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--sample-shift", type=int, default=10)
    p.add_argument("--no-graph-nodes", action="store_true")
    p.add_argument(
        "--capacity",
        type=int,
        default=1 << 24,
        help="records per context: enough that no repetition runs with a full buffer",
    )
    args = p.parse_args()
    variants = dict(v.split("=", 1) for v in args.variant)
    configs = ["none", *variants]
    samples = {c: {} for c in configs}
    totals = {c: [] for c in variants}
    # Stopped by a time limit (timeout(1) sends SIGTERM), still print what ran.
    signal.signal(signal.SIGTERM, _stop)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fatbins = build_variants(variants, Path(tmp))
            for r in range(args.rounds):
                for c in configs if r % 2 == 0 else reversed(configs):
                    res = run_once(args, fatbins.get(c), Path(tmp) / f"{c}.gpuobs")
                    print(f"round {r} {c}: {res}", flush=True)
                    if "_totals" in res:
                        totals[c].append(res.pop("_totals"))
                    for w, v in res.items():
                        samples[c].setdefault(w, []).append(v)
    except KeyboardInterrupt:
        print("\nstopped before the last round ended: the table below is from the processes that finished")
    print_table(args.mode, configs, next(iter(variants)), samples, totals)


def _stop(signum, frame):
    raise KeyboardInterrupt


def print_table(mode: str, configs: list, base: str, samples: dict, totals: dict):
    print(f"\nmode {mode}; median device ms (ratio to none; ratio to {base})")
    print("| workload | " + " | ".join(configs) + " |\n" + "|---" * (len(configs) + 1) + "|")
    workloads = dict.fromkeys(w for c in configs for w in samples[c] if not w.startswith("_"))
    for w in workloads:
        med = {c: statistics.median(samples[c][w]) for c in configs if w in samples[c]}
        cells = []
        for c in configs:
            if c not in med:
                cells.append("failed" if any(samples[c].values()) else "not run")
                continue
            ratios = [
                f"{med[c] / med[ref]:.2f}x" if ref == "none" else f"{med[c] / med[ref]:.3f}x {ref}"
                for ref in ("none", base)
                if ref in med and c not in ("none", ref)
            ]
            cells.append(f"{med[c]:.3f}" + (f" ({'; '.join(ratios)})" if ratios else ""))
        print(f"| {w} | " + " | ".join(cells) + " |")
    for c in configs[1:]:
        if totals[c]:
            keys = totals[c][0].keys()
            print(f"{c}: " + ", ".join(f"{k} {statistics.median(t[k] for t in totals[c]):,}" for k in keys))
    errors = {c: samples[c]["_error"] for c in configs if "_error" in samples[c]}
    if errors:
        print("errors: " + json.dumps(errors))


if __name__ == "__main__":
    main()
