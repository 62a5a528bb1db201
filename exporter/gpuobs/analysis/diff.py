"""`gpuobs diff A B`: what changed between two runs, per kernel. For each kernel name
in either recording: the time summary `stats` shows (total, instances, avg, median,
min, max of a launch's span), blocks recorded, SMs, exact counts and drops, A's and
B's values and the ratio B / A. Rows are sorted by regression: the largest ratio of
total time first (of exact counts in modes that keep no times); kernels only in B
lead, kernels only in A close. A recording compared with itself is 1.00x everywhere.

The numbers are `stats`'s own (kernel_summary.kernel_times, launches.kernel_stats),
so the diff of two runs and their two `stats` tables always agree."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..recording_file.recording import Recording
from ..recording_file.windows import WindowedRecording
from . import launches as analysis
from . import streamed_facts
from .kernel_names import short_names
from .kernel_summary import kernel_times
from .text_table import Column, render_csv, render_text
from .vocabulary import CSV_TITLES, compared_titles

# (key, what it is): compared per kernel, in this order
METRICS = (
    ("total_ns", "sum of the launches' spans (device clock)"),
    ("instances", "launches with a span"),
    ("avg_ns", "mean span"),
    ("med_ns", "median span"),
    ("min_ns", "shortest span"),
    ("max_ns", "longest span"),
    ("launches", "launches"),
    ("blocks_recorded", "block records kept"),
    ("sms", "SMs the kernel's records name"),
    ("counted", "exact blocks or accesses counted on the device"),
    ("blocks_dropped", "block records dropped (buffer full)"),
    ("block_ns_p50", "median block duration"),
)
TIME_KEYS = ("total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "block_ns_p50")


@dataclass
class KernelDiff:
    name: str
    a: dict  # metric -> value in A (None: not there)
    b: dict
    ratio: dict = field(default_factory=dict)  # metric -> B / A (None: only in one, or A is 0 and B is not)

    @property
    def status(self) -> str:
        if not self.a:
            return "only in B"
        if not self.b:
            return "only in A"
        return "both"


@dataclass
class Diff:
    a_path: str
    b_path: str
    a_mode: str
    b_mode: str
    sort_key: str  # the metric rows are sorted by
    kernels: list  # KernelDiff, worst regression first
    totals: dict  # metric -> (A, B, ratio) over the whole recordings


def ratio(a, b):
    """B / A; 1.0 when both are 0 (nothing changed); None when only one has a value or A is 0."""
    if a is None or b is None:
        return None
    if a == 0:
        return 1.0 if b == 0 else None
    return b / a


def per_kernel(source: Recording | WindowedRecording, progress=lambda *_: None) -> dict:
    """kernel name -> its metrics (stats's numbers; the blocks report summed over GPUs), of
    a recording loaded or read window by window (streamed_facts.py)."""
    if isinstance(source, WindowedRecording):
        facts = streamed_facts.gather(source, progress)
        rec, table, block_events = source.rec, facts.table, facts.event_counts["block_events"]
        stats = analysis.kernel_stats(rec, table=table, figures=facts.figures)
    else:
        rec, block_events = source, None
        table = analysis.launch_table(rec)
        stats = None
    rows: dict = {}
    for r in kernel_times(rec, table, block_events).rows:
        rows[r["name"]] = {k: r[k] for k in ("total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns")}
    per_device: dict = {}
    for r in analysis.kernel_stats(rec) if stats is None else stats:
        per_device.setdefault(r["kernel"], []).append(r)
    for name, parts in per_device.items():
        row = rows.setdefault(name, {})
        for key in ("launches", "blocks_recorded", "sms", "counted", "blocks_dropped"):
            row[key] = sum(p[key] for p in parts)
        # a percentile does not add up over GPUs: kept where the kernel ran on one
        row["block_ns_p50"] = parts[0]["block_ns_p50"] if len(parts) == 1 else None
    return rows


def diff(a: Recording | WindowedRecording, b: Recording | WindowedRecording, progress=lambda *_: None) -> Diff:
    ka, kb = per_kernel(a, progress), per_kernel(b, progress)
    a, b = (r.rec if isinstance(r, WindowedRecording) else r for r in (a, b))
    timed = any("total_ns" in r for r in ka.values()) and any("total_ns" in r for r in kb.values())
    sort_key = "total_ns" if timed else "counted"
    kernels = []
    for name in sorted(set(ka) | set(kb)):
        ra, rb = ka.get(name, {}), kb.get(name, {})
        d = KernelDiff(name, ra, rb)
        d.ratio = {key: ratio(ra.get(key), rb.get(key)) for key, _ in METRICS}
        kernels.append(d)
    # ties (1.00x): the kernel that costs most in B first
    kernels.sort(key=lambda d: (-_regression(d, sort_key), -(d.b.get(sort_key) or 0), d.name))
    totals = {}
    for key in ("total_ns", "launches", "blocks_recorded", "counted", "blocks_dropped"):
        ta = sum(r.get(key) or 0 for r in ka.values())
        tb = sum(r.get(key) or 0 for r in kb.values())
        totals[key] = (ta, tb, ratio(ta, tb))
    da, db = int(a.flushes["dropped"].sum()), int(b.flushes["dropped"].sum())
    totals["records_dropped"] = (da, db, ratio(da, db))
    return Diff(a.path, b.path, _mode(a), _mode(b), sort_key, kernels, totals)


def _mode(rec: Recording) -> str:
    return rec.run.mode_name if rec.run else "unknown"


def _regression(d: KernelDiff, key: str) -> float:
    if d.status == "only in B":
        return math.inf
    if d.status == "only in A":
        return -math.inf
    r = d.ratio.get(key)
    if r is None:  # A had 0 of it, B has some: as new
        return math.inf if (d.b.get(key) or 0) > 0 else 0.0
    return r


# -- outputs ---------------------------------------------------------------------------------------


def as_json(result: Diff) -> dict:
    return {
        "a": {"recording": result.a_path, "mode": result.a_mode},
        "b": {"recording": result.b_path, "mode": result.b_mode},
        "sorted_by": f"ratio of {result.sort_key}, largest first",
        "totals": {k: {"a": a, "b": b, "ratio": _round(r)} for k, (a, b, r) in result.totals.items()},
        "kernels": [
            {
                "kernel": d.name,
                "status": d.status,
                **{
                    key: {"a": d.a.get(key), "b": d.b.get(key), "ratio": _round(d.ratio.get(key))} for key, _ in METRICS
                },
            }
            for d in result.kernels
        ],
    }


def _round(r):
    return None if r is None else round(r, 4)


def flat_rows(result: Diff) -> list:
    """One dict per kernel, keyed by CSV header: Status, then A's, B's and the ratio of
    every metric (vocabulary.compared_titles), then the kernel's full name."""
    rows = []
    for d in result.kernels:
        row = {"Status": d.status}
        for key, _ in METRICS:
            a, b, r = compared_titles(key)
            row[a], row[b], row[r] = d.a.get(key), d.b.get(key), _round(d.ratio[key])
        row[CSV_TITLES["kernel"]] = d.name
        rows.append(row)
    return rows


def as_csv(result: Diff) -> str:
    """Headed as `stats` heads the same numbers (nsys style), A and B side by side."""
    titles = ["Status"] + [t for key, _ in METRICS for t in compared_titles(key)] + [CSV_TITLES["kernel"]]
    return render_csv([Column(t, t) for t in titles], flat_rows(result))


def _x(r) -> str:
    return "-" if r is None else f"{r:.2f}x"


def as_text(result: Diff, top: int | None = 30, width: int | None = None) -> str:
    lines = [
        f"A: {result.a_path} (mode {result.a_mode})",
        f"B: {result.b_path} (mode {result.b_mode})",
        "",
    ]
    t = result.totals
    summary = []
    for key, title in (("total_ns", "kernel time"), ("launches", "launches"), ("counted", "counted")):
        a, b, r = t[key]
        if a or b:
            shown = (f"{a / 1e3:,.1f} -> {b / 1e3:,.1f} us" if key == "total_ns" else f"{a:,} -> {b:,}") + f" ({_x(r)})"
            summary.append(f"{title} {shown}")
    a, b, r = t["records_dropped"]
    summary.append(f"records dropped {a:,} -> {b:,}" + (f" ({_x(r)})" if a or b else ""))
    lines.append("Totals: " + "; ".join(summary))
    lines.append("")
    timed = result.sort_key == "total_ns"
    lines.append(
        "Per kernel, B / A, the largest regression first (by "
        + ("total time" if timed else "exact counts: the modes keep no times")
        + "):"
    )
    shown = result.kernels if top is None else result.kernels[:top]
    names = short_names([d.name for d in shown], 100 if width is None else max(min(100, width - 2), 20))
    rows = []
    for d, name in zip(shown, names):
        row = {"name": name if d.status == "both" else f"{name}  [{d.status}]"}
        for key, _ in METRICS:
            row[key] = _x(d.ratio[key]) if d.status == "both" else None
        row["total_a"] = _us(d.a.get("total_ns"))
        row["total_b"] = _us(d.b.get("total_ns"))
        row["counted_a"], row["counted_b"] = d.a.get("counted"), d.b.get("counted")
        rows.append(row)
    # Timed: the launches' ratio is Inst's (launches with a span) and SMs rarely move, so
    # both are left to CSV and JSON: the numbers fit 80 columns under their names.
    if timed:
        columns = [
            Column("A (us)", "total_a"),
            Column("B (us)", "total_b"),
            Column("Total", "total_ns"),
            Column("Inst", "instances"),
            Column("Avg", "avg_ns"),
            Column("Med", "med_ns"),
            Column("Max", "max_ns"),
            Column("Blocks", "blocks_recorded"),
            Column("Dropped", "blocks_dropped"),
        ]
    else:
        columns = [
            Column("Counted A", "counted_a"),
            Column("Counted B", "counted_b"),
            Column("Counted", "counted"),
            Column("Launches", "launches"),
            Column("Blocks", "blocks_recorded"),
            Column("SMs", "sms"),
            Column("Dropped", "blocks_dropped"),
        ]
    lines.append(render_text(columns + [Column("Name", "name", left=True)], rows, width))
    if top is not None and len(result.kernels) > top:
        lines.append(
            f"  {len(result.kernels)} kernels, the first {top} shown (--top N for more; --format csv or json: all)"
        )
    if timed:
        lines.append("  A (us), B (us): total kernel time in each; the rest are ratios of stats' columns")
    lines.append("  ratio = B / A; 1.00x: unchanged; '-': only in one recording, or A had none of it")
    return "\n".join(lines)


def _us(ns):
    return None if ns is None else f"{ns / 1e3:,.1f}"


def command(a, b, fmt: str, top: int | None, salvage: bool) -> None:
    """`gpuobs diff`'s body (cli.py declares the options)."""

    from .. import cli

    if fmt not in ("table", "csv", "json"):
        cli._fail(f"--format {fmt!r} is not table, csv or json")
    if top is not None and top < 1:
        cli._fail(f"--top {top}: give 1 or more rows")
    with cli._load_for_analysis(a, salvage) as ra, cli._load_for_analysis(b, salvage) as rb, cli._progress() as bar:
        result = diff(ra, rb, bar)
    if result.a_mode != result.b_mode:
        cli._warn(f"A is mode {result.a_mode}, B mode {result.b_mode}: what one keeps the other may not")
    if fmt == "json":
        cli._say_json(as_json(result))
    elif fmt == "csv":
        cli._say(as_csv(result).rstrip("\n"))
    else:
        width = cli._output_width()  # COLUMNS also when piped, as stats
        for line in as_text(result, 30 if top is None else top, width).split("\n"):
            for part in cli._hanging(line, width):  # the table fits already; the notes wrap
                cli._say(part)
