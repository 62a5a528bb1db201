"""What `gpuobs info` shows about a recording: who recorded what, on which GPUs,
over how long, what was counted and kept, and the flush windows `trim` selects by
index. `describe` returns plain values (for --json); `text` lays them out."""

from __future__ import annotations

import datetime

import numpy as np

from ..ranges import format_ns, format_span
from ..recording_file import schema
from ..recording_file.recording import Recording
from ..recording_file.windows import WindowedRecording
from ..safe_text import printable
from ..selection import device_span, window_keys
from . import block_end_report, block_ends, ring_capacity, sampling, streamed_facts
from . import launches as analysis

MAX_WINDOW_LINES = 40
MAX_NOTICE_LINES = 50  # a recording may hold a million notices; the table shows the first
UNMATCHED_EXITS = (
    "threads whose exit found no block record to stamp: warps that left before their block's "
    "record was published (idle warps of a tail block); counted, they cannot move a block's end"
)


def _group_of(keys: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Index of each key in the sorted `groups`, or len(groups) where it has none."""
    at = np.searchsorted(groups, keys)
    hit = at < len(groups)
    hit[hit] = groups[at[hit]] == keys[hit]
    return np.where(hit, at, len(groups))


def _window_events(rec: Recording, groups: np.ndarray, t0: int) -> tuple:
    """Per flush window of `groups` (sorted window_keys): its events, and their first start and
    last end relative to t0 (0 where it has none)."""
    n = len(groups)
    ev = rec.events
    ev_group = _group_of(window_keys(rec.event_devices, rec.event_flushes), groups)
    events = np.bincount(ev_group, minlength=n + 1)[:n]
    first = np.zeros(n, np.int64)
    last = np.zeros(n, np.int64)
    if len(ev):
        order = np.argsort(ev_group, kind="stable")
        sorted_group = ev_group[order]
        starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
        present = sorted_group[starts] < n
        begin = ev["time_start"][order]
        end = np.maximum(ev["time_end"], ev["time_start"])[order]
        first[sorted_group[starts[present]]] = np.minimum.reduceat(begin, starts)[present].astype(np.int64) - t0
        last[sorted_group[starts[present]]] = np.maximum.reduceat(end, starts)[present].astype(np.int64) - t0
    return events, first, last


def _indexed_window_events(wr: WindowedRecording, groups: np.ndarray, t0: int) -> tuple:
    """_window_events from the windowed reader's index of event chunks (no event read)."""
    n = len(groups)
    chunks = [c for c in wr.chunks if c.count]
    at = _group_of(window_keys([c.device for c in chunks], [c.flush for c in chunks]), groups)
    events = np.zeros(n + 1, np.int64)
    first = np.full(n + 1, np.iinfo(np.int64).max, np.int64)
    last = np.zeros(n + 1, np.int64)
    np.add.at(events, at, [c.count for c in chunks])
    np.minimum.at(first, at, np.array([c.min_start for c in chunks], np.int64))
    np.maximum.at(last, at, np.array([c.max_end for c in chunks], np.int64))
    has = events[:n] > 0
    return events[:n], np.where(has, first[:n] - t0, 0), np.where(has, last[:n] - t0, 0)


def flush_windows(rec: Recording, wr: WindowedRecording | None = None) -> list[dict]:
    """One row per flush, in file order: its index (what `trim --flushes` takes), its
    events' span relative to the recording's start, launches and events. One grouped
    pass over the events and launches, whatever the number of flushes; `wr`: the
    recording read window by window (its index gives the events' figures)."""
    span = device_span(rec) if wr is None else wr.span()
    t0 = span[0] if span else 0
    flushes = rec.flushes
    groups, flush_group = np.unique(window_keys(flushes["device_index"], flushes["flush_seq"]), return_inverse=True)
    n = len(groups)
    events, first, last = _window_events(rec, groups, t0) if wr is None else _indexed_window_events(wr, groups, t0)
    launch_group = _group_of(window_keys(rec.launches["device_index"], rec.launch_flushes), groups)
    launches = np.bincount(launch_group, minlength=n + 1)[:n]
    rows = []
    for index, f in enumerate(flushes):
        g = int(flush_group[index])
        has_events = bool(events[g])
        rows.append(
            {
                "index": index,
                "device": int(f["device_index"]),
                "flush_seq": int(f["flush_seq"]),
                "launches": int(launches[g]),
                "events": int(events[g]),
                "dropped": int(f["dropped"]),
                "from_ns": int(first[g]) if has_events else None,
                "to_ns": int(last[g]) if has_events else None,
            }
        )
    return rows


def describe(source: Recording | WindowedRecording, progress=lambda *_: None) -> dict:
    """What `info` shows of a recording, loaded or read window by window (the events
    then read once, a segment at a time: streamed_facts.py)."""
    wr = source if isinstance(source, WindowedRecording) else None
    rec = source if wr is None else wr.rec
    if wr is None:
        s = analysis.summary(rec)
        span = device_span(rec)
    else:
        facts = streamed_facts.gather(wr, progress, table=False, kernels=False)
        s = analysis.summary(rec, facts.event_counts)
        span = wr.span()
    run = rec.run
    gpus = [
        {
            "index": int(d["device_index"]),
            "name": d["name"].decode(errors="replace"),
            "sms": int(d["sm_count"]),
            "cc": f"{int(d['cc_major'])}.{int(d['cc_minor'])}",
        }
        for d in rec.devices
    ]
    run_ns = None
    if run is not None and rec.end is not None and int(rec.end["end_monotonic_ns"]) >= run.start_monotonic_ns > 0:
        run_ns = int(rec.end["end_monotonic_ns"]) - run.start_monotonic_ns
    return {
        "recording": str(rec.path),  # keyed as stats and diff key it
        "tool_version": rec.tool_version,
        "format_version": rec.format_version,
        "pid": run.pid if run else None,
        "command": list(run.argv) if run else [],
        "started_realtime_ns": run.start_realtime_ns if run else None,
        "run_ns": run_ns,
        "sample_shift": run.sample_shift if run else None,
        "capacity": run.capacity if run else None,
        # what --capacity kept per context, by GPU: (records per SM ring, rings, in all)
        "capacity_kept": [list(ring_capacity.kept(run.capacity, g["sms"], rec.schema_hash) or ()) for g in gpus]
        if run and run.capacity
        else [],
        "window_every": run.window_every if run else 0,
        "gpus": gpus,
        "device_span_ns": (span[1] - span[0]) if span else None,
        "damaged_at": rec.damage.offset if rec.damage else None,
        # what `export --launches A:B` selects by
        "launch_ids": [int(rec.launches["launch_id"].min()), int(rec.launches["launch_id"].max())]
        if len(rec.launches)
        else None,
        "kernels_launched": _functions_launched(rec.launches),
        # block records kept: blocks_recorded, as stats' blocks report names them per kernel
        **{("blocks_recorded" if key == "block_events" else key): value for key, value in s.items()},
        "sampling": sampling.sampling(rec),
        "flush_windows": flush_windows(rec, wr),
        "windows_named_twice": _windows_named_twice(rec.flushes),
        "block_ends": block_end_report.totals(rec, block_ends.block_end_bounds(rec))
        if block_ends.is_block_starts(rec)
        else None,
    }


def _windows_named_twice(flushes: np.ndarray) -> int:
    """Flush windows whose (GPU, flush_seq) another window of the recording has too: a
    tool before 2026-12-07 numbered windows per context, so two contexts on one GPU (a
    device reset makes a second) could share numbers, and the launch counts and events
    that are keyed on them could be merged."""
    keys = window_keys(flushes["device_index"], flushes["flush_seq"])
    return int(len(keys) - len(np.unique(keys)))


def _functions_launched(launches: np.ndarray) -> int:
    """Distinct (device, function slot) pairs of the launches: by array, not a set of a
    million pairs."""
    key = (launches["device_index"].astype(np.uint64) << np.uint64(32)) | launches["function_slot"].astype(np.uint64)
    return len(np.unique(key))


def _when(realtime_ns: int | None) -> str:
    if not realtime_ns:
        return "unknown"
    return datetime.datetime.fromtimestamp(realtime_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def text(d: dict) -> list[str]:
    """The readable form of describe()'s dict, one line each, never wider than its content."""
    mode = d["mode"]
    lines = [d["recording"]]

    def line(label: str, value: str) -> None:
        lines.append(f"  {label:<15} {value}")

    who = f"{d['tool_version']}" + (f", pid {d['pid']}" if d["pid"] else "")
    line("recorded by", who)
    line("command", " ".join(d["command"]) if d["command"] else "unknown")
    line(
        "started",
        _when(d["started_realtime_ns"])
        + " (this machine's local time)"
        + (f"; ran {format_ns(d['run_ns'])}" if d["run_ns"] is not None else ""),
    )
    detail = ""
    sampled = schema.mode_has(mode, schema.Trait.ACCESS_RECORDS) and not schema.mode_has(
        mode, schema.Trait.EVERY_ACCESS
    )
    if sampled and d["sample_shift"] is not None:
        detail = f", 1 access in 2^{d['sample_shift']} kept"
    if d["window_every"]:
        detail += f", recorded 1 interval in {d['window_every']}"
    if d["capacity"]:
        detail += f", --capacity {d['capacity']:,} records per context"
        kept = {tuple(k) for k in d.get("capacity_kept", []) if k}
        if len(kept) == 1:
            each, rings, total = kept.pop()
            detail += f" (kept {total:,}: {each:,} per SM ring x {rings})"
    line("mode", mode + detail)
    for g in d["gpus"]:
        line(f"GPU {g['index']}", f"{g['name']}, {g['sms']} SMs, compute capability {g['cc']}")
    if d["device_span_ns"] is not None:
        line(
            "device span",
            f"{format_span(0, d['device_span_ns'])} (first to last event, device clock; "
            "--time-window and trim --time count from its start)",
        )
    elif d["damaged_at"] is not None:
        line("device span", f"none: no event record survived the damage at byte {d['damaged_at']}")
    else:
        line("device span", f"none: mode {mode} keeps no device times")
    line(
        "launches",
        f"{d['launches']:,} of {d['kernels_launched']:,} kernels ({d['functions']:,} known"
        + (f"; ids {d['launch_ids'][0]}..{d['launch_ids'][1]}, for export --launches" if d["launch_ids"] else "")
        + "); "
        f"modules: {d['modules_patched']} patched, "
        f"{d['modules_failed']} failed" + (f", {d['modules_deferred']} deferred" if d["modules_deferred"] else ""),
    )
    if d["unrecorded_launches"]:
        line(
            "",
            f"{d['unrecorded_launches']:,} more launches ran outside recording windows or a duty cycle's on time "
            "(not recorded)",
        )
    unit = "accesses" if schema.mode_has(mode, schema.Trait.MEMORY_PATCH) else "blocks"
    line("counted", f"{d['counted']:,} {unit} (exact, counted on the device)")
    line("kept", f"{d['blocks_recorded']:,} block records, {d['memory_events']:,} memory samples")
    line(
        "records",
        f"{d['attempted']:,} attempted = {d['recorded']:,} recorded + {d['dropped']:,} dropped"
        + (" (buffer full)" if d["dropped"] else "")
        + f"; {d['filtered']:,} left out by --kernels or trim; {d['incomplete']:,} incomplete",
    )
    if d.get("sampling"):
        line("sampled", sampling.effect_text(d["sampling"], unit))
    if d["events_unattributed"] or d["counts_unattributed"]:
        line(
            "no launch",
            f"{d['events_unattributed']:,} records and {d['counts_unattributed']:,} counted {unit} belong to no "
            "listed launch (graph replays recorded with --graph-nodes none, or launches the tool never saw): "
            "the records are in the trace on their SMs, in no kernel's slice; the counts are not in `counted`",
        )
    if d["unmatched_exit_threads"]:
        line("unmatched exits", f"{d['unmatched_exit_threads']:,} {UNMATCHED_EXITS}")
    if d["unconfirmed_ends"]:
        line(
            "late ends",
            f"{d['unconfirmed_ends']:,} block ends may have been stamped by a later run of their grid id "
            "(a graph replayed, a conditional body run again); flagged in the trace",
        )
    bounds = d.get("block_ends")
    if bounds:
        line("block ends", block_end_report.bound_line(bounds))
        line("", bounds["meaning"])
        line("warp slots", block_end_report.accounting_line(bounds))
    if d.get("conditional_body_launches"):
        line(
            "",
            f"{d['conditional_body_launches']:,} of the launches are kernels inside conditional nodes' bodies "
            "(WHILE, IF, SWITCH): each listed once per graph replay, its count and records all its runs "
            "(runs = counted / grid blocks; the notice names them)",
        )
    if d.get("device_launches"):
        line("", f"{d['device_launches']:,} of the launches were made by kernels (dynamic parallelism)")
    notices = d.get("notices", [])
    for note in notices if len(notices) <= MAX_NOTICE_LINES else notices[:MAX_NOTICE_LINES]:
        line("notice", note)  # what the tool could not record
    if len(notices) > MAX_NOTICE_LINES:
        line("", f"... {len(notices) - MAX_NOTICE_LINES:,} more notices (`gpuobs info --json` lists every one)")
    line(
        "complete",
        "yes (the run closed the recording)"
        if d["complete"]
        else "no: the process did not close the recording (killed or crashed); all it flushed is here",
    )
    windows = d["flush_windows"]
    lines.append(f"  flush windows   {len(windows)} (`gpuobs trim --flushes A:B` takes these indices)")
    if d.get("windows_named_twice"):
        line(
            "",
            f"{d['windows_named_twice']:,} of them have another window's number on the same GPU (a tool before "
            "2026-12-07 numbered windows per context: two contexts on one GPU, or a device reset); launches of "
            "such windows that share a grid id's counter slot may show one merged count",
        )
    shown = windows if len(windows) <= MAX_WINDOW_LINES else windows[:20] + [None] + windows[-10:]
    for w in shown:
        if w is None:
            lines.append(f"    ... {len(windows) - 30:,} more (`gpuobs info --json` lists every one)")
            continue
        when = format_span(w["from_ns"], w["to_ns"]) if w["from_ns"] is not None else "no events"
        lines.append(
            f"    {w['index']:>4}  GPU {w['device']}  {when:<22} {w['launches']:>7,} launches "
            f"{w['events']:>9,} events" + (f"  {w['dropped']:,} dropped" if w["dropped"] else "")
        )
    # argv, notices, names and paths come from the file: no terminal escapes, no surrogates
    return [printable(line) for line in lines]
