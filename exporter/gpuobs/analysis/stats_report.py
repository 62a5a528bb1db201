"""`gpuobs stats`: per kernel reports of one recording, as text, CSV or JSON.

* kernels: the time summary nsys (cuda_gpu_kern_sum) and the PyTorch profiler lead
  with (gpuobs.kernel_summary), from block_trace recordings;
* blocks: per kernel launches, grid blocks, block records kept, SMs, block-duration
  percentiles, exact device counts, memory samples and drops (gpuobs.analysis);
* block_starts recordings, with either: per kernel how its block ends are bounded
  (block_end_report), and the warp-arrival accounting.
Text shows folded kernel names (gpuobs.kernel_names); CSV and JSON the full ones."""

from __future__ import annotations

from ..recording_file import schema
from ..recording_file.recording import Recording
from ..recording_file.windows import WindowedRecording
from . import block_end_report, sampling, streamed_facts
from . import launches as analysis
from .kernel_names import short_name, short_names
from .kernel_summary import SORT_KEYS as KERNEL_SORT_KEYS
from .kernel_summary import SPAN_MEANING, SPAN_MEANING_BOUNDS, kernel_times, sort_rows
from .text_table import Column, render_csv, render_text
from .vocabulary import csv_columns

BLOCK_SORT_KEYS = ("blocks", "launches", "p50", "p99", "counted", "name")
TABLE_TOP = 30
US = "{:,.1f}"

KERNEL_COLUMNS = [
    Column("Time %", "time_pct", "{:.1f}"),  # times in us, as the title says: the numbers fit 80 columns
    Column("Total", "total_us", US),
    Column("Instances", "instances"),
    Column("Avg", "avg_us", US),
    Column("Med", "med_us", US),
    Column("Min", "min_us", US),
    Column("Max", "max_us", US),
    Column("StdDev", "stddev_us", US),
    Column("Name", "short", left=True),
]
WEAK_COLUMN = Column("Weak", "weak")  # block_starts: launches left out, their end bound is weak
# CSV headers as nsys stats writes them (vocabulary.py: one header per JSON key).
KERNEL_CSV = csv_columns(
    ("time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "weak")
)
BLOCK_COLUMNS = [
    Column("Launches", "launches"),
    Column("Blocks", "blocks"),
    Column("Recorded", "blocks_recorded"),
    Column("SMs", "sms"),
    Column("p50 (us)", "p50_us", US),
    Column("p99 (us)", "p99_us", US),
    Column("Counted", "counted"),
    Column("Mem samples", "memory_events"),
    Column("Dropped", "blocks_dropped"),
    Column("Name", "short", left=True),
]
BLOCK_CSV = csv_columns(
    (
        "device",
        "launches",
        "blocks",
        "blocks_recorded",
        "sms",
        "block_ns_p50",
        "block_ns_p90",
        "block_ns_p99",
        "counted",
        "counted_shared_launches",
        "memory_events",
        "blocks_dropped",
        "ends_unconfirmed",
    )
)
BOUND_COLUMNS = [
    Column("Blocks", "blocks_bounded"),
    Column("Slot %", "slot_pct", "{:.1f}"),
    Column("Stream %", "stream_pct", "{:.1f}"),
    Column("Quiet %", "quiet_pct", "{:.1f}"),
    Column("None %", "none_pct", "{:.1f}"),
    Column("Weak %", "weak_pct", "{:.1f}"),
    Column("Incomplete", "slots_incomplete"),
    Column("Name", "short", left=True),
]
BOUND_CSV = csv_columns(
    (
        "device",
        "blocks_bounded",
        "slot_pct",
        "stream_pct",
        "quiet_pct",
        "none_pct",
        "weak_pct",
        "slots_incomplete",
    )
)
COLUMN_MEANING = {
    "blocks": "Blocks: grid blocks launched",
    "blocks_recorded": "Recorded: block records kept",
    "sms": "SMs: SMs its records came from",
    "p50_us": "p50/p99: block durations",
    "counted": "Counted: exact {unit} counted on the device",
    "memory_events": "Mem samples: accesses kept",
    "blocks_dropped": "Dropped: blocks launched but not recorded (buffer full)",
}


def _block_columns(mode: str) -> list:
    """The columns that mean something in this mode: block records and their durations
    in block_trace (block_starts: records, no durations), memory samples in memory modes."""
    drop = set()
    T = schema.Trait
    if not schema.mode_has(mode, T.BLOCK_RECORDS):
        drop |= {"blocks_recorded", "blocks_dropped"}
    if not schema.mode_has(mode, T.MEASURED_ENDS):
        drop |= {"p50_us", "p99_us"}
    if not schema.mode_has(mode, T.MEMORY_PATCH):
        drop.add("memory_events")
    if mode in schema.MODE_NAMES.values() and not schema.mode_has(mode, T.BLOCK_RECORDS | T.ACCESS_RECORDS):
        drop.add("sms")  # no records, so no SM is known
    return [c for c in BLOCK_COLUMNS if c.key not in drop]


SAME_KEY = {"instances": "launches", "launches": "instances"}  # one count, as each report calls it


def sort_keys(report: str) -> tuple:
    """Keys --sort takes: with both reports, any key of either (each report sorts by the
    keys it has, by its own default otherwise, and says by what)."""
    keys = {"kernels": KERNEL_SORT_KEYS, "blocks": BLOCK_SORT_KEYS}.get(report)
    if keys is None:
        keys = KERNEL_SORT_KEYS + tuple(k for k in BLOCK_SORT_KEYS if k not in KERNEL_SORT_KEYS)
    return keys + tuple(SAME_KEY[k] for k in keys if k in SAME_KEY and SAME_KEY[k] not in keys)


def _key_for(sort: str | None, keys: tuple) -> str | None:
    """`sort` as this report knows it, or None (its default)."""
    if sort in keys:
        return sort
    return SAME_KEY.get(sort) if SAME_KEY.get(sort) in keys else None


def _kernels(rec: Recording, table, sort: str | None, top: int | None, facts=None) -> dict:
    times = kernel_times(rec, table, facts.event_counts["block_events"] if facts else None)
    rows = list(times.rows)
    sort_rows(rows, sort or "total")
    rows = [{("kernel" if k == "name" else k): v for k, v in r.items()} for r in rows]  # as every report keys it
    return {
        "timed": times.timed,
        "span": SPAN_MEANING_BOUNDS if times.ends_are_bounds else SPAN_MEANING,
        "ends_are_bounds": times.ends_are_bounds,
        "launches_end_unbounded": times.launches_end_unbounded,
        "launches_end_weak": times.launches_end_weak,
        "device_span_ns": times.device_span_ns,
        "sort": sort or "total",
        "kernels": len(rows),
        "launches": times.launches,
        "launches_without_span": times.launches_without_span,
        "launches_partial": times.launches_partial,
        "launches_partial_left_out": times.launches_partial_left_out,
        "rows": rows[:top] if top else rows,
    }


def _sort_blocks(rows: list, key: str) -> None:
    if key == "name":  # as shown, not by the hidden "void ..." of the full name
        rows.sort(key=lambda r: (short_name(r["kernel"]), r["kernel"]))
        return
    column = {
        "blocks": "blocks",  # grid blocks launched, the Blocks column (block records are 0 in memory modes)
        "launches": "launches",
        "p50": "block_ns_p50",
        "p99": "block_ns_p99",
        "counted": "counted",
    }[key]
    rows.sort(key=lambda r: (-(r[column] or 0), -r["counted"], r["kernel"]))


def _blocks(rec: Recording, sort: str | None, top: int | None, facts=None) -> dict:
    rows = analysis.kernel_stats(rec, table=facts.table, figures=facts.figures) if facts else analysis.kernel_stats(rec)
    _sort_blocks(rows, sort or "blocks")
    total = analysis.counted_total(rec, None)
    attributed = sum(r["counted"] for r in rows)
    return {
        "sort": sort or "blocks",
        "kernels": len(rows),
        "counted_total": total,
        "counted_unattributed": total - attributed,
        "rows": rows[:top] if top else rows,
    }


def build(
    source: Recording | WindowedRecording, report: str, sort: str | None, top: int | None, fmt: str, progress=None
) -> dict:
    """The reports asked for, as plain values, of a recording loaded or read window by
    window (its events read once, a segment at a time: streamed_facts.py). `top` None:
    30 rows in a table, all in CSV/JSON."""
    facts = None
    if isinstance(source, WindowedRecording):
        facts = streamed_facts.gather(source, progress or (lambda *_: None))
        source = source.rec
    rec = source
    if top is None and fmt == "table":
        top = TABLE_TOP
    mode = rec.run.mode_name if rec.run else "unknown"
    result = {"recording": str(rec.path), "mode": mode}
    sampled = sampling.sampling(rec)
    if sampling.is_active(sampled):
        result["sampling"] = sampled
    if facts is not None:
        table = facts.table
    else:
        table = (
            analysis.launch_table(rec)
            if report in ("kernels", "all") or schema.mode_has(mode, schema.Trait.BOUNDED_ENDS)
            else None
        )
    if report in ("kernels", "all"):
        result["kernel_times"] = _kernels(rec, table, _key_for(sort, KERNEL_SORT_KEYS), top, facts)
    if report in ("blocks", "all"):
        result["blocks"] = _blocks(rec, _key_for(sort, BLOCK_SORT_KEYS), top, facts)
    if table is not None and table.block_ends is not None:
        rows = block_end_report.kernel_rows(rec, table.block_ends, table.name)
        result["block_ends"] = {
            **block_end_report.totals(rec, table.block_ends),
            "kernels": len(rows),
            "sort": "blocks",
            "rows": rows[:top] if top else rows,
        }
    return result


def _shown(part: dict) -> str:
    shown, total = len(part["rows"]), part["kernels"]
    if shown < total:
        return f"  {total} kernels, the first {shown} by {part['sort']} shown (--top N for more)"
    return f"  {total} kernels"


def _name_width(width: int | None) -> int:
    """How long a short kernel name may be: 100, or a line of its own at `width`."""
    return 100 if width is None else max(min(100, width - 2), 20)


def _named_rows(rows, width: int | None = None) -> list:
    """Copies of table rows with a short kernel name, its GPU named when not the first."""
    rows = [dict(r) for r in rows]
    for r, short in zip(rows, short_names([r["kernel"] for r in rows], _name_width(width))):
        r["short"] = short if r["device"] == 0 else f"{short} (GPU {r['device']})"
    return rows


def as_text(result: dict, width: int | None = None) -> str:
    mode = result["mode"]
    lines = [f"{result['recording']} (mode {mode})"]
    if result.get("sampling"):
        unit = "accesses" if schema.mode_has(mode, schema.Trait.MEMORY_PATCH) else "blocks"
        exact = "counts are exact in the on time" if result["sampling"].get("duty_on_device") else "counts are exact"
        lines.append(f"sampled: {sampling.effect_text(result['sampling'], unit)}; {exact}")
    k = result.get("kernel_times")
    if k is not None:
        lines.append("")
        if not k["timed"]:
            lines.append(
                f"Kernel time summary: none. Mode {mode} records no block start or end times, so no "
                "kernel has a span (block_trace records them)"
                + ("; the counts are below." if "blocks" in result else ".")
            )
        else:
            lines.append(
                "Kernel time summary, us (the spans of each kernel's launches, device clock"
                + ("; upper bounds: block_starts records no end):" if k["ends_are_bounds"] else "):")
            )
            rows = [dict(r) for r in k["rows"]]
            for r, short in zip(rows, short_names([r["kernel"] for r in rows], _name_width(width))):
                r["short"] = short
                for key in ("total", "avg", "med", "min", "max", "stddev"):
                    r[f"{key}_us"] = None if r[f"{key}_ns"] is None else r[f"{key}_ns"] / 1e3
            columns = (
                KERNEL_COLUMNS[:-1] + [WEAK_COLUMN, KERNEL_COLUMNS[-1]] if k["ends_are_bounds"] else KERNEL_COLUMNS
            )
            lines.append(render_text(columns, rows, width))
            lines.append(_shown(k) + "; full names: --format csv or json")
            lines.append(f"  {k['span']}")
            if k["launches_without_span"]:
                # A graph replay listed in a flush window that also holds an on-time replay of the
                # same graph stays listed, blockless, when it ran in a duty cycle's off time.
                off_time = (result.get("sampling") or {}).get("duty_on_device")
                lines.append(
                    f"  {k['launches_without_span']:,} of {k['launches']:,} launches have no block "
                    "recorded, so no span, and are not in it"
                    + (" (graph replays that ran in the duty cycle's off time, or sampled out)" if off_time else "")
                )
            if k["launches_partial"] and k.get("launches_partial_left_out"):
                lines.append(
                    f"  {k['launches_partial']:,} launches were recorded in part (the sample gate turned while they "
                    "ran, or blocks were dropped): left out of it"
                )
            elif k["launches_partial"]:
                lines.append(f"  {k['launches_partial']:,} launches lost blocks (dropped): their spans may be short")
            if k["launches_end_weak"]:
                lines.append(
                    f"  {k['launches_end_weak']:,} launches end at a weak bound (Weak): left out of Total and "
                    f"Time %; the kernels' spans sum to {sum(r['total_ns'] for r in k['rows']) / 1e3:,.1f} us "
                    f"of a device span of {k['device_span_ns'] / 1e3:,.1f} us"
                )
            if k["launches_end_unbounded"]:
                lines.append(
                    f"  {k['launches_end_unbounded']:,} launches have a block with no end bound: their spans "
                    "may be short"
                )
    b = result.get("blocks")
    if b is not None:
        lines.append("")
        lines.append("Blocks per kernel:")
        rows = _named_rows(b["rows"], width)
        for r in rows:
            r["p50_us"] = None if r["block_ns_p50"] is None else r["block_ns_p50"] / 1e3
            r["p99_us"] = None if r["block_ns_p99"] is None else r["block_ns_p99"] / 1e3
        columns = _block_columns(mode)
        lines.append(render_text(columns, rows, width))
        lines.append(_shown(b))
        unit = "accesses" if schema.mode_has(mode, schema.Trait.MEMORY_PATCH) else "blocks"
        total = f"  counted: {b['counted_total']:,} {unit} in all (as `gpuobs info`)"
        if b["counted_unattributed"]:
            total += (
                f", {b['counted_unattributed']:,} of them for grids whose count launches of different "
                "kernels share (in no row)"
            )
        lines.append(total)
        meaning = [COLUMN_MEANING[c.key].format(unit=unit) for c in columns if c.key in COLUMN_MEANING]
        lines.append("  " + "; ".join(meaning))
    e = result.get("block_ends")
    if e is not None:
        lines.append("")
        lines.append("Block end bounds per kernel (share of its blocks whose end each bound gives):")
        lines.append(render_text(BOUND_COLUMNS, _named_rows(e["rows"], width), width))
        lines.append(_shown(e))
        lines.append(f"  {block_end_report.bound_line(e)}")
        lines.append(f"  {e['meaning']}")
        lines.append(f"  {block_end_report.accounting_line(e)}")
    return "\n".join(lines)


# CSV is one table whatever the reports and recordings (a CSV reader takes one): headers as
# nsys stats writes them, each row naming its recording and report first and its kernel
# last (the full name); a column a report does not have is empty in its rows.
CSV_TABLES = (
    ("kernels", "kernel_times", KERNEL_CSV),
    ("blocks", "blocks", BLOCK_CSV),
    ("block_ends", "block_ends", BOUND_CSV),
)


def csv_columns(results: list) -> list:
    titles = ["Recording", "Report"]
    for _report, part, columns in CSV_TABLES:
        if any(r.get(part) is not None for r in results):
            titles += [c.title for c in columns if c.title not in titles]
    return [Column(t, t) for t in titles + ["Name"]]


def as_csv(results: list) -> str:
    rows = []
    for r in results:
        for report, part, columns in CSV_TABLES:
            if r.get(part) is not None:  # a kernels report with no times adds no row; the header stays
                rows += [
                    {"Recording": r["recording"], "Report": report, "Name": row["kernel"]}
                    | {c.title: row.get(c.key) for c in columns}
                    for row in r[part]["rows"]
                ]
    return render_csv(csv_columns(results), rows)
