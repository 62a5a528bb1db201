"""The overhead ladder: every workload under every mode, ratios to "no tool"
measured in the same run. Configurations alternate round by round (the tool is
either in a process or not), and each cell is the median over rounds of the
per-process median of device times.

    python benchmarks/overhead_ladder.py --rounds 2 --out ladder.md

(--out rewrites its file with the table after every round: copy the table into
docs/benchmarks.md, never point --out at it.)

Two builds of the tool side by side in one run (an A/B of a change): build the
other one with its own Makefile and name it; `MODE@NAME` runs MODE under it.

    git archive main tool schemas device_patches | tar -x -C ab_base
    make -C ab_base/tool OUT=$PWD/ab_base/build
    python benchmarks/overhead_ladder.py --tool-variant base=ab_base/build \
        --configs none,block_noop,block_noop@base,block_starts,block_starts@base
"""

import argparse
import ast
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "exporter"))
from gpuobs.record import native_build  # noqa: E402
from gpuobs.record.run import RecordOptions, tool_environment  # noqa: E402

TOOL_VARIANTS: dict = {}  # NAME -> NativeBuild (--tool-variant)
# A buffer big enough for every repetition: timed runs record, not drop.
CAPACITY = 1 << 24
CONFIGS = [
    "none",
    "off",
    "block_noop",
    "block_counter",
    "block_starts",
    "block_trace_noop",
    "block_trace",
    "mem_noop",
    "mem_sampled",
    "mem_full",
]
# Variants: MODE+api (--api-trace), MODE+nographs (--graph-nodes none), MODE+everynode
# (--graph-nodes every: per-node callbacks at every replay, the old default), MODE+lossless, MODE+windowN
# (recording windows: 1 repetition in N recorded, the mean over all repetitions).
# Each rung against the no-op rungs below it: block_trace_noop pays for the same
# patch points as block_trace (entry and exit), block_noop for the entry alone.
NOOP_OF = {
    "block_counter": ("block_noop",),
    "block_starts": ("block_noop",),
    "block_trace": ("block_trace_noop", "block_noop"),
    "mem_sampled": ("mem_noop",),
    "mem_full": ("mem_noop",),
}


def worker_command(reps: int, only: str) -> list:
    """The process that times the workloads (benchmarks/workloads.py)."""
    return [
        sys.executable,
        str(ROOT / "benchmarks" / "workloads.py"),
        "--reps",
        str(reps),
        *(["--only", only] if only else []),
    ]


def run_worker(cmd: list, env: dict | None = None) -> dict:
    """Runs a worker (maybe under the tool); its GPUOBS_BENCH line, or why there is none."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((out for out in proc.stdout.splitlines() if out.startswith("GPUOBS_BENCH ")), None)
    if line is None:
        return {"_error": f"exit {proc.returncode}: {proc.stderr[-800:]}"}
    return json.loads(line[len("GPUOBS_BENCH ") :])


def split_config(config: str) -> tuple[str, list, str]:
    """MODE+VARIANT...@TOOL -> (MODE, [VARIANT, ...], TOOL or "")."""
    body, _, tool = config.partition("@")
    mode, *variants = body.split("+")
    return mode, variants, tool


def variant_builds(specs: list) -> dict:
    """NAME=DIR (a folder built by tool/Makefile) -> the NativeBuild to inject."""
    builds = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        d = Path(folder).resolve()
        files = [d / "libgpuobs_tool.so", d / "gpuobs_patches.fatbin", d / "gpuobs_clock_probe.fatbin"]
        missing = [p.name for p in files if not p.is_file()]
        if not sep or not name or missing:
            wanted = ", ".join(missing) or "the three built files"
            sys.exit(f"--tool-variant {spec}: want NAME=DIR with {wanted} in DIR")
        build = native_build.NativeBuild(d, *files, native_build.find_toolchain().sanitizer_lib)
        builds[name] = build
    return builds


def run_variant(mode: str, lossless: bool, tool: str, reps: int, only: str, workdir: Path) -> dict:
    """MODE under another build of the tool: the worker with that build's environment
    (as `gpuobs record` makes it, with the ladder's buffer). +lossless matters for a
    build whose host tool samples (this one's, beside older patches)."""
    opts = RecordOptions(
        mode=mode, capacity=CAPACITY, lossless=lossless, output=workdir / f"bench_{mode}@{tool}.gpuobs"
    )
    opts.output.unlink(missing_ok=True)
    return run_worker(worker_command(reps, only), tool_environment(TOOL_VARIANTS[tool], opts))


def run_config(config: str, reps: int, only: str, workdir: Path) -> dict:
    worker = worker_command(reps, only)
    env = None
    if config == "none":
        cmd = worker
    else:
        mode, variants, tool = split_config(config)
        if tool:
            if set(variants) - {"lossless"}:
                sys.exit(f"{config}: a tool variant takes no +VARIANT but +lossless")
            return run_variant(mode, "lossless" in variants, tool, reps, only, workdir)
        flags = {
            "api": ["--api-trace"],
            "nographs": ["--graph-nodes", "none"],
            "everynode": ["--graph-nodes", "every"],
            "lossless": ["--lossless"],  # waits, never snapshots nor samples: what the tool did before issue 33
        }
        window = next((v for v in variants if v.startswith("window")), "")
        if window:  # windowN: the worker records 1 repetition in N (recording windows)
            env = dict(os.environ, GPUOBS_BENCH_WINDOW=window[len("window") :])
            flags[window] = ["--paused"]
        cmd = [
            sys.executable,
            "-m",
            "gpuobs",
            "record",
            "--force",
            "--mode",
            mode,
            "--capacity",
            str(CAPACITY),
            *[f for v in variants for f in flags[v]],
            "-o",
            str(workdir / f"bench_{config}.gpuobs"),
            "--",
            *worker,
        ]
    return run_worker(cmd, env)


def environment() -> str:
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        smi = "unknown GPU"
    return smi


def fmt(v):
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def timings(samples: dict, config: str, workload: str) -> list:
    """A configuration's per-process times for a workload (rounds that failed left no number)."""
    return [v for v in samples[config].get(workload, []) if isinstance(v, (int, float))]


def table(samples: dict, configs: list, rounds_done: int, args) -> str:
    workloads = sorted(
        {w for c in samples.values() for w in c if not w.startswith("_")},
        key=lambda w: list(samples[configs[0]]).index(w) if w in samples[configs[0]] else 99,
    )
    cell = {}
    for c in configs:
        for w in workloads:
            vals = timings(samples, c, w)
            across = min if args.across_rounds == "min" else statistics.median
            cell[c, w] = across(vals) if vals else None
    gpu = f"see {', '.join(map(str, args.from_log))}" if args.from_log else environment()
    lines = [
        f"GPU: {gpu}; date: {datetime.date.today()}; command: "
        f"`python benchmarks/overhead_ladder.py --rounds {args.rounds} --reps {args.reps}"
        + (f" --across-rounds {args.across_rounds}`" if args.across_rounds != "median" else "`")
        + (f" ({rounds_done} rounds done)" if rounds_done < args.rounds else ""),
        "",
        f"Device time in ms, the {args.across_rounds} over rounds of each process's median (empty_launch_us: "
        "host microseconds per launch), then the ratio to no tool "
        "and, for counting and capturing rungs, to their own no-op rungs.",
        "",
        "| workload | " + " | ".join(configs) + " |",
        "|---" * (len(configs) + 1) + "|",
    ]
    for w in workloads:
        row = [w]
        for c in configs:
            v, base = cell[c, w], cell.get(("none", w))
            if v is None:
                row.append("failed")
                continue
            text = fmt(v)
            if base and c != "none":
                text += f" ({v / base:.2f}x"
                mode, variants, tool = split_config(c)
                for noop in NOOP_OF.get(mode, ()):
                    # the no-op rung with the same variants (e.g. +nographs) and tool, else the plain one
                    same = "+".join([noop, *variants]) + (f"@{tool}" if tool else "")
                    ref = same if cell.get((same, w)) else noop
                    if cell.get((ref, w)):
                        text += f"; {v / cell[ref, w]:.2f}x {ref}"
                text += ")"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    windowed = [c for c in configs if samples[c].get("_windows")]
    if windowed:
        lines += [
            "",
            "Recording windows, last round: median device ms inside and outside the window, and host ms "
            "per resume + pause:",
            "",
        ]
        for c in windowed:
            for w, d in samples[c]["_windows"][-1].items():
                lines.append(
                    f"- {c} {w}: inside {d['in_ms']:.3f}, outside {d['out_ms']:.3f}, "
                    f"toggle {d['toggle_host_ms']:.1f} ms"
                )
    lines += ab_lines(samples, configs, workloads)
    errors = {c: samples[c].get("_error") for c in configs if samples[c].get("_error")}
    if errors:
        lines += ["", "Errors: " + json.dumps(errors)]
    return "\n".join(lines)


def ab_lines(samples: dict, configs: list, workloads: list) -> list:
    """MODE against MODE@NAME, where both ran: every process's median on each side,
    so that a difference can be read against the spread between processes (which
    on some kernels is wider than the 2% a change is held to)."""
    pairs = []
    for c in configs:
        mode, _, tool = split_config(c)
        if tool:  # against this build's runs of the same mode, whatever their +VARIANTs
            pairs += [(same, c) for same in configs if split_config(same)[0] == mode and not split_config(same)[2]]
    if not pairs:
        return []
    lines = [
        "",
        "A/B, each side's processes (device ms: median [fastest-slowest], n): this build against the "
        "other, the change of the medians and of the fastest processes:",
        "",
    ]
    for base, other in pairs:
        for w in workloads:
            a, b = timings(samples, base, w), timings(samples, other, w)
            if not a or not b:
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            lines.append(
                f"- {w}, {base} vs {other}: {fmt(ma)} [{fmt(min(a))}-{fmt(max(a))}] n={len(a)} vs "
                f"{fmt(mb)} [{fmt(min(b))}-{fmt(max(b))}] n={len(b)}: {ma / mb - 1:+.1%} median, "
                f"{min(a) / min(b) - 1:+.1%} fastest"
            )
    return lines


def samples_from_logs(paths: list, configs: list) -> tuple[dict, int]:
    """Several runs' logs pooled (the same configurations run again, in other processes)."""
    samples, rounds = {c: {} for c in configs}, 0
    for path in paths:
        more, done = samples_from_log(path, configs)
        rounds += done
        for c in configs:
            for w, vals in more[c].items():
                samples[c].setdefault(w, []).extend(vals)
    return samples, rounds


def samples_from_log(path: Path, configs: list) -> tuple[dict, int]:
    """The samples of an earlier run's log ("round N CONFIG: {...}" lines), e.g. one cut short."""
    samples = {c: {} for c in configs}
    rounds = 0
    for line in path.read_text().splitlines():
        head, sep, res = line.partition(": ")
        parts = head.split()
        if not sep or len(parts) != 3 or parts[0] != "round" or parts[2] not in samples:
            continue
        rounds = max(rounds, int(parts[1]) + 1)
        for w, v in ast.literal_eval(res).items():
            samples[parts[2]].setdefault(w, []).append(v)
    return samples, rounds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--only", default="")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--out", default="", help="the table, rewritten after every round")
    p.add_argument(
        "--tool-variant",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another build of the tool (tool/Makefile's OUT folder); configs MODE@NAME run under it",
    )
    p.add_argument(
        "--from-log",
        nargs="+",
        default=[],
        help="only print the table of an earlier run's log (several: their rounds pooled)",
    )
    p.add_argument(
        "--across-rounds",
        choices=("median", "min"),
        default="median",
        help="how each cell combines its rounds: min keeps each configuration's fastest process, for "
        "kernels whose processes differ by more than the effect measured",
    )
    args = p.parse_args()
    configs = args.configs.split(",")
    TOOL_VARIANTS.update(variant_builds(args.tool_variant))
    unknown = sorted({split_config(c)[2] for c in configs} - set(TOOL_VARIANTS) - {""})
    if unknown and not args.from_log:
        sys.exit(f"configs name tool variants not given with --tool-variant: {', '.join(unknown)}")
    if args.from_log:
        samples, done = samples_from_logs([Path(f) for f in args.from_log], configs)
        print(table(samples, configs, done, args))
        return
    samples = {c: {} for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for c in configs if r % 2 == 0 else list(reversed(configs)):
                res = run_config(c, args.reps, args.only, Path(tmp))
                print(f"round {r} {c}: {res}", flush=True)
                for w, v in res.items():
                    samples[c].setdefault(w, []).append(v)
            if args.out:  # a run cut short still leaves the table of its finished rounds
                Path(args.out).write_text(table(samples, configs, r + 1, args) + "\n")
    print(table(samples, configs, args.rounds, args))


if __name__ == "__main__":
    main()
