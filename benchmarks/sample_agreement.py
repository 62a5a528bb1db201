"""Sampled against full: the serving loop (serving_rate.py's worker, a CUDA graph
replayed back to back) recorded under `gpuobs record` with the default sampler and
in full (--budget 0 --device-memory 8192), per mode; per kernel (by name) the two
must agree on:

  counts         the device's exact block counts (and launches) EQUAL: same program.
  full           the full recording dropped, sampled out and left unattributed nothing.
  share          each kernel's recorded share (recorded / launched blocks) within
                 SIGMAS * sqrt(S / R) of the overall share S, R the graph replays it
                 ran in. The gate turns on time, so the sampling unit is a stretch of
                 time, not a block: m open stretches, each rho = S R / m replays long,
                 give a kernel's recorded replays a variance of at most m rho (short
                 stretches: each covers it or not) or m / 2 (long ones: two edges that
                 cut a replay), both at most S R: sd(share) <= sqrt(S / R), whatever m.
                 Its share of all recorded blocks: within SIGMAS * sqrt(2) * p /
                 sqrt(S R) of the full run's p (the same, relative; in points).
  sms            the distribution of its recorded blocks over SMs (kernels with at
                 least MIN_RECORDS sampled): total-variation distance within
                 sqrt(K / (2 pi n)) + SIGMAS * sqrt((1 - 2/pi) / n) / 2 + TV_FLOOR,
                 K its SMs, n = 1 / (1/n_sampled + 1/n_full) (the expected TV of two
                 multinomial samples, and SIGMAS of its spread, plus run-to-run slack).
  spans          block_trace: block span (end - start) p50/p90/p99; the sampled
                 percentile lies in the full run's band [Q(p - d), Q(p + d)],
                 d = SIGMAS * sqrt(p (1 - p) / L) with L its recorded launches
                 combined as n above (blocks of one launch are no independent draws),
                 widened by SPAN_REL and one timer tick (read from the data: the gcd
                 of the %globaltimer stamps). block_starts records no end: its bounds
                 depend on which other blocks were recorded (a block's slot bound is
                 the next recorded start in its slots, so at the end of each open
                 stretch it is late), so its spans (slot bounds, not weak) are shown
                 only, not checked.

The default budget records a burst at the start, then at its rate: most
sampled records come from the first part of the run. A duty cycle (--sampled-args
"--duty 20ms/100ms --budget 0", run with GPUOBS_DUTY_ON_HOST=1 in the environment:
a duty cycle kept on the device counts only its on times, so the counts check would
not hold by design) samples the run evenly; --baseline shows how far
two full runs differ.

Checks 2-4 read the graph-node launches only (the replayed decode step: setup and
capture kernels run once, at the start, inside the sampler's burst, so their share
is not the loop's); a recording with no graph nodes reads every launch.

    python3 benchmarks/sample_agreement.py --replays 600 --json agreement.json
    GPUOBS_DUTY_ON_HOST=1 python3 benchmarks/sample_agreement.py --modes block_trace \\
        --sampled-args "--duty 20ms/100ms --budget 0"
    python3 benchmarks/sample_agreement.py --compare FULL.gpuobs SAMPLED.gpuobs   # no GPU: two recordings

Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SERVING = ROOT / "benchmarks" / "serving_rate.py"
PERCENTILES = (50, 90, 99)


@dataclass
class Tolerances:
    sigmas: float = 4.0  # standard errors of the sampling allowed, every check
    min_records: int = 200  # sampled block records a kernel needs for the SM and span checks
    tv_floor: float = 0.03  # run-to-run slack of the SM distribution (two processes, two schedules)
    span_rel: float = 0.05  # run-to-run slack of span percentiles (clocks, contention)
    span_ticks: int = 1  # and this many timer ticks


# --- per-kernel facts of one recording ---------------------------------------------------------


def timer_tick(values: np.ndarray) -> int:
    """The %globaltimer's step: the gcd of the stamps' distances from the first (a sample)."""
    v = np.asarray(values, np.uint64)[:200_000]
    if len(v) < 2:
        return 1
    g = int(np.gcd.reduce((v - v.min()).astype(np.int64)))
    return g or 1


def kernel_facts(rec) -> dict:
    """{'kernels': {name: facts}, run-level facts} of one recording (see module doc)."""
    from gpuobs.analysis import launches as la
    from gpuobs.recording_file import schema

    of = la.launch_index_of_events(rec)
    table = la.launch_table(rec, of)
    stats = la.kernel_stats(rec, of, table)
    names = np.asarray(table.name, object)
    n = len(rec.launches)
    kernel_names = sorted(set(table.name))
    index = {k: i for i, k in enumerate(kernel_names)}
    kernel_of_launch = np.array([index[x] for x in names], np.int64) if n else np.zeros(0, np.int64)
    graph = (rec.launches["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    loop = graph if graph.any() else np.ones(n, bool)
    ev = rec.events
    rows = np.flatnonzero((ev["kind"] == schema.EventKind.BLOCK) & (of >= 0))
    rows = rows[loop[of[rows]]]
    ev_launch = of[rows]
    ev_kernel = kernel_of_launch[ev_launch]
    starts = ev["time_start"][rows].astype(np.int64)
    block_trace = la.timed_blocks(rec)
    if block_trace:
        # an end a later replay stamped (flagged) is no measured end
        measured = (ev["flags"][rows] & schema.BLOCK_END_UNCONFIRMED) == 0
        spans = ev["time_end"][rows].astype(np.int64) - starts
        tick = timer_tick(np.concatenate([ev["time_start"][rows], ev["time_end"][rows]]))
    else:
        # bounds, shown only: the tightest (slot), not weak (module doc)
        be = table.block_ends
        at = be.at(rows)
        measured = (be.quality[at] == 1) & ~be.weak[at]
        spans = be.end_bound_ns[at].astype(np.int64) - starts
        tick = timer_tick(ev["time_start"][rows])
    measured &= spans >= 0
    grid = table.grid_blocks.astype(np.int64)
    replay = rec.launches["graph_launch_id"].astype(np.int64)
    kernels = {}
    order = np.argsort(ev_kernel, kind="stable")
    bounds = np.searchsorted(ev_kernel[order], np.arange(len(kernel_names) + 1))
    for k, name in enumerate(kernel_names):
        mine = order[bounds[k] : bounds[k + 1]]
        mine_launches = kernel_of_launch == k
        loop_launches = mine_launches & loop
        units = len(np.unique(replay[loop_launches])) if graph.any() else int(loop_launches.sum())
        kernels[name] = {
            "launches": int(mine_launches.sum()),
            "blocks": int(grid[mine_launches].sum()),
            "counted": sum(r["counted"] for r in stats if r["kernel"] == name),
            "counted_shared_launches": sum(r["counted_shared_launches"] for r in stats if r["kernel"] == name),
            "loop_launches": int(loop_launches.sum()),
            "loop_blocks": int(grid[loop_launches].sum()),
            "units": units,  # graph replays it ran in (launches, without graphs)
            "recorded": len(mine),
            "recorded_launches": len(np.unique(ev_launch[mine])),
            "sm": np.bincount(ev["sm_id"][rows[mine]].astype(np.int64), minlength=1),
            "spans": np.sort(spans[mine][measured[mine]]),
        }
    t = rec.totals
    return {
        "mode": rec.run.mode_name if rec.run else "unknown",
        "block_trace": block_trace,
        "graph": bool(graph.any()),
        "tick_ns": tick,
        "counted_total": la.counted_total(rec),
        "counts_unattributed": int(rec.flushes["unattributed"].sum()) if len(rec.flushes) else 0,
        "events_unattributed": int((of < 0).sum()),
        "recorded": int(t["recorded"]),
        "dropped": int(t["dropped"]),
        "sampled_out": int(t["sampled_out"]),
        "gate_turns": int(rec.sampling["gate_turns"].sum()) if len(rec.sampling) else 0,
        "kernels": kernels,
    }


# --- the comparison ----------------------------------------------------------------------------


def compare(full, sampled, tol: Tolerances | None = None) -> dict:
    """The checks of the module doc on two loaded recordings of the same program."""
    return compare_facts(kernel_facts(full), kernel_facts(sampled), tol or Tolerances())


def _check(rows: list, failed: list, evaluated: int, note: str = "") -> dict:
    return {"pass": not failed, "evaluated": evaluated, "failed": failed, "rows": rows, "note": note}


def check_counts(f: dict, s: dict) -> dict:
    failed, rows = [], []
    for name in sorted(set(f["kernels"]) | set(s["kernels"])):
        a, b = f["kernels"].get(name), s["kernels"].get(name)
        if a is None or b is None:
            failed.append({"kernel": name, "why": "in one recording only"})
            continue
        exact = a["counted_shared_launches"] == 0 and b["counted_shared_launches"] == 0
        row = {"kernel": name, "launches": (a["launches"], b["launches"]), "counted": (a["counted"], b["counted"])}
        rows.append(row)
        if a["launches"] != b["launches"] or (exact and a["counted"] != b["counted"]):
            failed.append(row)
    # counter slots other kernels shared are in no kernel's count: the totals hold them
    total_f = f["counted_total"] + f["counts_unattributed"]
    total_s = s["counted_total"] + s["counts_unattributed"]
    rows.append({"kernel": "(all)", "counted": (total_f, total_s)})
    if total_f != total_s:
        failed.append(rows[-1])
    return _check(rows, failed, len(rows))


def check_full(f: dict) -> dict:
    lost = {k: f[k] for k in ("dropped", "sampled_out", "events_unattributed")}
    return _check([lost], [lost] if any(lost.values()) else [], 1)


def check_shares(f: dict, s: dict, tol: Tolerances) -> tuple:
    names = [n for n in s["kernels"] if s["kernels"][n]["loop_blocks"] and n in f["kernels"]]
    rec_s = sum(s["kernels"][n]["recorded"] for n in names)
    overall = rec_s / max(1, sum(s["kernels"][n]["loop_blocks"] for n in names))
    rec_f = sum(f["kernels"][n]["recorded"] for n in names)
    share_rows, share_failed, pp_rows, pp_failed = [], [], [], []
    for name in names:
        k = s["kernels"][name]
        units = max(1, k["units"])
        mine = k["recorded"] / k["loop_blocks"]
        allowed = tol.sigmas * math.sqrt(max(overall, 1e-9) / units)
        row = {"kernel": name, "share": mine, "overall": overall, "diff": mine - overall, "tol": allowed}
        share_rows.append(row)
        if abs(mine - overall) > allowed:
            share_failed.append(row)
        p = f["kernels"][name]["recorded"] / max(1, rec_f)
        q = k["recorded"] / max(1, rec_s)
        pp_tol = 100 * tol.sigmas * math.sqrt(2) * p / math.sqrt(max(overall, 1e-9) * units)
        row = {"kernel": name, "full_pct": 100 * p, "sampled_pct": 100 * q, "diff_pp": 100 * (q - p), "tol_pp": pp_tol}
        pp_rows.append(row)
        if abs(q - p) * 100 > pp_tol:
            pp_failed.append(row)
    note = f"overall recorded share {overall:.4f}"
    return _check(share_rows, share_failed, len(names), note), _check(pp_rows, pp_failed, len(names), note)


def tv_distance(a: np.ndarray, b: np.ndarray) -> float:
    size = max(len(a), len(b))
    pa = np.pad(a, (0, size - len(a))) / max(1, a.sum())
    pb = np.pad(b, (0, size - len(b))) / max(1, b.sum())
    return 0.5 * float(np.abs(pa - pb).sum())


def check_sms(f: dict, s: dict, tol: Tolerances) -> dict:
    rows, failed = [], []
    for name, k in s["kernels"].items():
        other = f["kernels"].get(name)
        if other is None or k["recorded"] < tol.min_records or other["recorded"] < tol.min_records:
            continue
        a, b = other["sm"], k["sm"]
        size = max(len(a), len(b))
        cells = int(((np.pad(a, (0, size - len(a))) + np.pad(b, (0, size - len(b)))) > 0).sum())
        n = 1 / (1 / k["recorded"] + 1 / other["recorded"])
        allowed = (
            math.sqrt(cells / (2 * math.pi * n)) + tol.sigmas * math.sqrt((1 - 2 / math.pi) / n) / 2 + tol.tv_floor
        )
        row = {
            "kernel": name,
            "tv": tv_distance(a, b),
            "tol": allowed,
            "sms": cells,
            "n": (other["recorded"], k["recorded"]),
        }
        rows.append(row)
        if row["tv"] > allowed:
            failed.append(row)
    return _check(rows, failed, len(rows), f"kernels with >= {tol.min_records} records in both")


def quantile(sorted_values: np.ndarray, p: float) -> float:
    return float(np.percentile(sorted_values, min(100.0, max(0.0, p))))


def check_spans(f: dict, s: dict, tol: Tolerances) -> dict:
    tick = max(f["tick_ns"], s["tick_ns"])
    rows, failed = [], []
    for name, k in s["kernels"].items():
        other = f["kernels"].get(name)
        if other is None or len(k["spans"]) < tol.min_records or len(other["spans"]) < tol.min_records:
            continue
        launches = 1 / (1 / max(1, k["recorded_launches"]) + 1 / max(1, other["recorded_launches"]))
        row = {"kernel": name}
        bad = False
        for p in PERCENTILES:
            d = 100 * tol.sigmas * math.sqrt(p / 100 * (1 - p / 100) / launches)
            vf, vs = quantile(other["spans"], p), quantile(k["spans"], p)
            lo = quantile(other["spans"], p - d) * (1 - tol.span_rel) - tol.span_ticks * tick
            hi = quantile(other["spans"], p + d) * (1 + tol.span_rel) + tol.span_ticks * tick
            row[f"p{p}"] = {"full": vf, "sampled": vs, "rel": (vs - vf) / vf if vf else 0.0, "band": (lo, hi)}
            bad |= not lo <= vs <= hi
        rows.append(row)
        if bad:
            failed.append(row)
    if not (f["block_trace"] and s["block_trace"]):
        # shown, not checked (module doc)
        return {**_check(rows, [], 0, "block_starts: slot-bounded spans shown, not checked"), "pass": True}
    return _check(rows, failed, len(rows), f"timer tick {tick} ns")


def compare_facts(f: dict, s: dict, tol: Tolerances) -> dict:
    share, pp = check_shares(f, s, tol)
    checks = {
        "counts": check_counts(f, s),
        "full": check_full(f),
        "share": share,
        "share_pp": pp,
        "sms": check_sms(f, s, tol),
        "spans": check_spans(f, s, tol),
    }
    run = ("mode", "graph", "tick_ns", "recorded", "dropped", "sampled_out", "gate_turns", "counted_total")
    return {
        "pass": all(c["pass"] for c in checks.values()),
        "tolerances": asdict(tol),
        "full": {k: f[k] for k in run},
        "sampled": {k: s[k] for k in run},
        "checks": checks,
    }


# --- the report --------------------------------------------------------------------------------


def short(name: str, width: int = 44) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def report(result: dict, title: str) -> None:
    c = result["checks"]
    print(f"\n== {title}: full {result['full']}\n   sampled {result['sampled']}")
    sms = {r["kernel"]: r for r in c["sms"]["rows"]}
    spans = {r["kernel"]: r for r in c["spans"]["rows"]}
    pp = {r["kernel"]: r for r in c["share_pp"]["rows"]}
    print(
        f"{'kernel':<44} {'share%':>7} {'+-tol':>6} {'pp':>6} {'+-tol':>5} {'TV':>6} {'tol':>5} "
        + " ".join(f"{'p' + str(p) + ' rel':>9}" for p in PERCENTILES)
    )
    for r in sorted(c["share"]["rows"], key=lambda r: -pp[r["kernel"]]["full_pct"]):
        name = r["kernel"]
        line = f"{short(name):<44} {100 * r['share']:7.2f} {100 * r['tol']:6.2f} "
        line += f"{pp[name]['diff_pp']:6.2f} {pp[name]['tol_pp']:5.2f} "
        line += f"{sms[name]['tv']:6.3f} {sms[name]['tol']:5.3f} " if name in sms else f"{'-':>6} {'-':>5} "
        if name in spans:
            line += " ".join(f"{100 * spans[name][f'p{p}']['rel']:+8.1f}%" for p in PERCENTILES)
        print(line)
    for key, check in c.items():
        verdict = "PASS" if check["pass"] else "FAIL"
        print(f"  {key:<9} {verdict}  ({check['evaluated']} compared; {check['note']})")
        for row in check["failed"][:8]:
            rest = {k: v for k, v in row.items() if k != "kernel"}
            print(f"      {short(row.get('kernel', ''), 60)}: {json.dumps(rest, default=_plain)[:300]}")
    print(f"  => {'PASS' if result['pass'] else 'FAIL'}")


# --- running the serving loop ------------------------------------------------------------------


def record(mode: str, extra: list, args, out: Path) -> None:
    worker = [sys.executable, str(SERVING), "--worker", "--replays", str(args.replays), "--layers", str(args.layers)]
    worker += ["--hidden", str(args.hidden), "--batch", str(args.batch), "--max-len", str(args.max_len)]
    cmd = [sys.executable, "-m", "gpuobs", "record", "--force", "--mode", mode, "-o", str(out), *extra, "--", *worker]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    (out.parent / f"{out.stem}.stderr").write_text(proc.stderr)
    print(f"  recorded {out.name} in {time.time() - t0:.0f} s: {' '.join(extra) or '(defaults)'}", flush=True)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"`{shlex.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replays", type=int, default=600)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--modes", default="block_trace,block_starts")
    p.add_argument(
        "--sampled-args",
        default="",
        help='the sampled run\'s record options (default: the default budget), e.g. "--duty 20ms/100ms --budget 0"',
    )
    p.add_argument("--full-args", default="--budget 0 --device-memory 8192")
    p.add_argument(
        "--baseline", action="store_true", help="also a second full run, compared with the first (run-to-run noise)"
    )
    p.add_argument("--compare", nargs=2, metavar=("FULL", "SAMPLED"), help="compare two recordings; run nothing")
    p.add_argument("--workdir", default="", help="where recordings go (default: a temporary folder)")
    p.add_argument("--json", default="", help="write every result here")
    for field, value in asdict(Tolerances()).items():
        p.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args()
    tol = Tolerances(**{k: getattr(args, k) for k in asdict(Tolerances())})
    print("tolerances:", json.dumps(asdict(tol)), "(formulas: see --help)", flush=True)
    import gpuobs

    results = {}
    if args.compare:
        results["compare"] = compare(gpuobs.load(args.compare[0]), gpuobs.load(args.compare[1]), tol)
        report(results["compare"], f"{args.compare[0]} (full) vs {args.compare[1]} (sampled)")
    else:
        workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpuobs-agreement-"))
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"recordings in {workdir}", flush=True)
        for mode in args.modes.split(","):
            full, sampled = workdir / f"{mode}_full.gpuobs", workdir / f"{mode}_sampled.gpuobs"
            record(mode, shlex.split(args.full_args), args, full)
            record(mode, shlex.split(args.sampled_args), args, sampled)
            t0 = time.time()
            full_facts = kernel_facts(gpuobs.load(full))
            results[mode] = compare_facts(full_facts, kernel_facts(gpuobs.load(sampled)), tol)
            print(f"  compared in {time.time() - t0:.0f} s", flush=True)
            report(results[mode], f"{mode}: full vs sampled ({args.sampled_args or 'default budget'})")
            if args.baseline:
                again = workdir / f"{mode}_full2.gpuobs"
                record(mode, shlex.split(args.full_args), args, again)
                results[f"{mode}_baseline"] = compare_facts(full_facts, kernel_facts(gpuobs.load(again)), tol)
                report(results[f"{mode}_baseline"], f"{mode}: full vs full again (baseline)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=_plain))
    ok = all(r["pass"] for r in results.values())
    print("\nALL PASS" if ok else "\nFAILED: " + ", ".join(k for k, r in results.items() if not r["pass"]))
    return 0 if ok else 1


def _plain(value):
    """json's fallback: numpy scalars and arrays."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


if __name__ == "__main__":
    sys.exit(main())
