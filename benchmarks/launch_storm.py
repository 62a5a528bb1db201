"""A launch storm under every block mode, wall time side by side in one run.

T host threads, each on its own non-blocking stream, each launching N small
kernels (64 blocks of 128) with a stream sync every 100 launches: the context is
never quiet. Configurations alternate round by round; each cell is the median
over rounds. Also checks what each recording holds (launches, counts, drops).

    python benchmarks/launch_storm.py --rounds 3 [--threads 8 --launches 1000]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "exporter"))
from gpuobs import load  # noqa: E402
from gpuobs.analysis import launches as analysis  # noqa: E402
from gpuobs.record import native_build  # noqa: E402
from gpuobs.record.run import RecordOptions, tool_environment  # noqa: E402

MODES = ["none", "block_noop", "block_counter", "block_trace_noop", "block_trace", "mem_sampled"]


def build(out_dir: Path) -> Path:
    exe = out_dir / "launch_storm"
    subprocess.run(
        ["nvcc", "-O2", "-arch=sm_90", "-o", str(exe), str(ROOT / "tests" / "gpu_programs" / "launch_storm.cu")],
        check=True,
    )
    return exe


def run(exe: Path, mode: str, args: list, out_dir: Path, variant: tuple | None = None) -> dict:
    """One storm process: `mode` names a mode, or a variant's name when `variant`
    is (mode, patches fatbin, extra environment)."""
    cmd = [str(exe), *map(str, args)]
    rec_path = out_dir / f"{mode}.gpuobs"
    env = None
    if variant is not None:
        vmode, fatbin, extra = variant
        rec_path.unlink(missing_ok=True)
        extra = dict(extra)
        if fatbin is not None:
            extra["GPUOBS_PATCHES"] = str(fatbin)
        env = tool_environment(native_build.build(), RecordOptions(mode=vmode, output=rec_path, extra_env=extra))
    elif mode != "none":
        rec_path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(rec_path), "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    result = json.loads(line) if line.startswith("{") else {}
    result["rc"] = proc.returncode
    if proc.returncode != 0:
        result["stderr"] = proc.stderr[-600:]
    if mode != "none" and rec_path.exists():
        rec = load(rec_path)
        s = analysis.summary(rec)
        table = analysis.launch_table(rec)
        result["check"] = {k: s[k] for k in ("launches", "counted", "attempted", "recorded", "dropped")}
        result["check"]["shared_counts"] = int((table.counted_shared > 1).sum())
        result["check"]["raced"] = int(((rec.launches["flags"] & 2) != 0).sum())
        result["device"] = device_spans(rec, analysis)
    return result


def device_spans(rec, analysis) -> dict:
    """Where the device time went, from block records with ends: the median
    kernel span (first start to last end) and block duration, in us."""
    import numpy as np

    ev = rec.events
    if len(ev) == 0 or not (ev["time_end"] > 0).any():
        return {}
    of = analysis.launch_index_of_events(rec)
    ok = (of >= 0) & (ev["time_end"] > 0)
    idx, start, end = of[ok], ev["time_start"][ok].astype(np.int64), ev["time_end"][ok].astype(np.int64)
    order = np.argsort(idx, kind="stable")
    idx, start, end = idx[order], start[order], end[order]
    first = np.r_[0, np.flatnonzero(np.diff(idx)) + 1]
    k_start, k_end = np.minimum.reduceat(start, first), np.maximum.reduceat(end, first)
    spans = k_end - k_start
    # Idle time on each stream between one kernel's end and the next one's start,
    # and the share of the device timeline with any kernel running.
    stream = rec.launches["stream_id"][idx[first]]
    gaps = []
    for s in np.unique(stream):
        o = np.argsort(k_start[stream == s])
        ks, ke = k_start[stream == s][o], k_end[stream == s][o]
        gaps.append(ks[1:] - ke[:-1])
    gaps = np.concatenate(gaps) if gaps else np.zeros(1)
    o = np.argsort(k_start)
    busy, cur_s, cur_e = 0, k_start[o[0]], k_end[o[0]]
    for i in o[1:]:
        if k_start[i] > cur_e:
            busy, cur_s, cur_e = busy + cur_e - cur_s, k_start[i], k_end[i]
        else:
            cur_e = max(cur_e, k_end[i])
    busy += cur_e - cur_s
    return {
        "kernel_span_us_p50": float(np.median(spans)) / 1e3,
        "block_us_p50": float(np.median(end - start)) / 1e3,
        "stream_gap_us_p50": float(np.median(gaps)) / 1e3,
        "device_ms": float(k_end.max() - k_start.min()) / 1e6,
        "busy_ms": float(busy) / 1e6,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--launches", type=int, default=1000)
    p.add_argument("--blocks", type=int, default=64)
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=MODE[:PATCHES.cu][,ENV=VALUE...]: the storm under a patch variant or extra environment",
    )
    a = p.parse_args()
    modes = a.modes.split(",")
    variants = {}
    for v in a.variant:
        name, spec = v.split("=", 1)
        head, *envs = spec.split(",")
        vmode, _, source = head.partition(":")
        variants[name] = (vmode, source or None, dict(e.split("=", 1) for e in envs))
    modes += list(variants)
    args = [a.threads, a.launches, a.blocks, a.sync_every]
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        exe = build(out_dir)
        sources = {name: source for name, (_, source, _) in variants.items() if source}
        if sources:
            from patch_ab import build_variants  # same folder: the project's own patch build, per variant

            fatbins = build_variants(sources, out_dir)
            variants = {name: (vmode, fatbins.get(name), extra) for name, (vmode, _, extra) in variants.items()}
        times = {m: [] for m in modes}
        checks = {}
        for r in range(a.rounds):
            for mode in modes:
                res = run(exe, mode, args, out_dir, variants.get(mode))
                if res["rc"] != 0:
                    print(f"{mode}: exit {res['rc']}: {res.get('stderr')}", flush=True)
                    continue
                times[mode].append(res["ms"])
                checks[mode] = res.get("check")
                first = f"first launch back at {res.get('first_launch_ms', 0):.1f} ms"
                print(
                    f"round {r} {mode}: {res['ms']:.1f} ms ({first}, first batch synced at "
                    f"{res.get('first_batch_ms', 0):.1f}) {res.get('check') or ''} {res.get('device') or ''}",
                    flush=True,
                )
    base = statistics.median(times["none"]) if times.get("none") else None
    print(
        f"\nlaunch storm: {a.threads} threads x {a.launches} launches x {a.blocks} blocks, sync every {a.sync_every}; "
        f"median of {a.rounds} rounds"
    )
    print("| mode | wall ms | x none | x block_trace_noop | recording |")
    print("|---|---|---|---|---|")
    floor = statistics.median(times["block_trace_noop"]) if times.get("block_trace_noop") else None
    for mode in modes:
        if not times[mode]:
            continue
        ms = statistics.median(times[mode])
        print(
            f"| {mode} | {ms:.1f} | {ms / base:.2f}x | "
            + (f"{ms / floor:.2f}x" if floor else "-")
            + f" | {checks.get(mode) or ''} |"
            if base
            else f"| {mode} | {ms:.1f} |"
        )


if __name__ == "__main__":
    main()
