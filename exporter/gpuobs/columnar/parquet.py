"""Recordings to Parquet: one directory, a table per folder, partitioned by process
and GPU (Hive style, `blocks/pid=4242/gpu=0/part-0.parquet`), for DuckDB on a host
and Spark, Trino or any Arrow reader over a fleet's many recordings. The columns and
their meaning are columnar/tables.py's (docs/parquet-schema.md).

Blocks and memory samples are written as the recording's event chunks are walked,
at most ROW_GROUP_ROWS rows at a time, each batch its own row group: what is held
is one batch being made and one being written, not the table. A recording read
window by window (recording_file/windows.py) is exported in one pass over its
events that also sums its launch table (_write_windowed); the files are the same.
What `gpuobs stats` reports per launch (span, blocks, counts) is in the launches
table, computed by analysis/launches.py, the same code."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..analysis import launches as analysis
from ..analysis.block_ends import LABELS as END_LABELS
from ..analysis.event_pass import resolved_segments
from ..analysis.launch_tally import LaunchTally
from ..errors import ExportError, SelectionError
from ..perfetto_export.clock import clock_relation
from ..perfetto_export.export import node_positions
from ..ranges import format_span
from ..recording_file import schema
from ..recording_file.overlap_bound import OverlapBound
from ..recording_file.recording import Recording
from ..recording_file.recording_checks import FLUSH_COUNTERS
from ..recording_file.windows import WindowedRecording
from ..selection import (
    Criteria,
    Selection,
    device_span,
    event_mask,
    matched_launches,
    select,
    time_selection,
    time_window,
)
from . import tables

ROW_GROUP_ROWS = 1 << 19  # one is made while the last is written: ~400 MB held at most
COMPRESSION = "zstd"
# Columns of nearly one value a row (times, addresses) are written plain: a dictionary of them is
# built only to be dropped, and it was half the time of writing the blocks. The rest keep one.
PLAIN_COLUMNS = {
    "blocks": {"start_ns", "end_ns", "start_monotonic_ns", "end_monotonic_ns"},
    "memory_samples": {"time_ns", "time_monotonic_ns", "address", "pc"},
}


@dataclass
class ParquetSummary:
    path: Path
    rows: dict = field(default_factory=dict)  # table -> rows written
    files: int = 0
    bytes: int = 0


class _Writers:
    """One ParquetWriter per (table, pid, gpu), opened at its first batch. A batch is
    encoded and compressed on a thread of its own (pyarrow lets go of the GIL) while
    the next one is made: at most one is in flight, so at most two are held."""

    def __init__(self, root: Path):
        self.root = root
        self.open: dict = {}
        self.rows: dict = {name: 0 for name in tables.TABLES}
        self.pool = None
        self.pending = None  # the write in flight

    def write(self, table: str, pid: int, gpu: Optional[int], columns: dict) -> None:
        sch = tables.schema(table)
        batch = pa.Table.from_arrays([_arrow(columns[f.name], f.type) for f in sch], schema=sch)
        if batch.num_rows == 0:
            return
        writer = self._writer(table, pid, gpu)
        self._wait()
        if self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpuobs-parquet")
        self.pending = self.pool.submit(writer.write_table, batch, row_group_size=ROW_GROUP_ROWS)
        self.rows[table] += batch.num_rows

    def _wait(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def _writer(self, table: str, pid: int, gpu: Optional[int]) -> pq.ParquetWriter:
        key = (table, pid, gpu)
        writer = self.open.get(key)
        if writer is None:
            folder = self.root / table / f"pid={pid}"
            if tables.partitioned_by_gpu(table):
                folder = folder / f"gpu={gpu}"
            folder.mkdir(parents=True, exist_ok=True)
            sch = tables.schema(table)
            plain = PLAIN_COLUMNS.get(table)
            dictionary = [f.name for f in sch if f.name not in plain] if plain else True
            writer = self.open[key] = pq.ParquetWriter(
                folder / "part-0.parquet", sch, compression=COMPRESSION, use_dictionary=dictionary
            )
        return writer

    def every_table(self, pid: int, devices: list) -> None:
        """A file for every table of the process and each GPU, empty where it has no rows, so
        that a query over any table of any export finds its files."""
        for table in tables.TABLES:
            for gpu in devices if tables.partitioned_by_gpu(table) else [None]:
                self._writer(table, pid, gpu)

    def close(self, quiet: bool = False) -> None:
        """Waits for the write in flight (`quiet`: an error it raised is not raised
        again: an earlier one is being said) and closes every file."""
        try:
            self._wait()
        except Exception:
            if not quiet:
                raise
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)
                self.pool = None
            for writer in self.open.values():
                writer.close()


def _arrow(values, kind: pa.DataType) -> pa.Array:
    """A column from numpy (a (values, null mask) pair for nullable ones), a list, or an arrow array."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, tuple):
        data, null = values
        return pa.array(np.asarray(data), type=kind, mask=np.asarray(null, bool))
    if isinstance(values, np.ndarray):
        return pa.array(values, type=kind)
    return pa.array(values, type=kind)


def _dictionary(codes: np.ndarray, words: list, null: Optional[np.ndarray] = None) -> pa.DictionaryArray:
    indices = pa.array(codes.astype(np.int32), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(words, pa.string()))


class _Names:
    """Kernel names of one GPU as dictionary codes: function slot -> code."""

    def __init__(self, rec: Recording, device: int, slots: np.ndarray):
        known = {k[1] for k in rec.functions if k[0] == device}
        top = max([int(slots.max()) if len(slots) else 0, *known, 0])
        names = [rec.function(device, slot).name for slot in range(top + 1)]
        self.words, codes = np.unique(np.asarray(names, object), return_inverse=True)
        self.words = list(self.words)
        self.code_of_slot = codes.ravel().astype(np.int32)

    def of(self, slots: np.ndarray) -> pa.DictionaryArray:
        return _dictionary(self.code_of_slot[slots.astype(np.int64)], self.words)


def write_parquet(
    recordings: list,
    out: Path,
    criteria: Criteria = Criteria(),
    force: bool = False,
    progress: Callable | None = None,
) -> ParquetSummary:
    """Write `recordings` under the directory `out`, replaced only with force (and only
    if it is an earlier gpuobs Parquet export). Written beside it first and renamed
    at the end, so a failure leaves no partial directory and the previous one as it was."""
    out = Path(out)
    say = progress or (lambda *_: None)
    _check_target(out, force)
    recs = [r.rec if isinstance(r, WindowedRecording) else r for r in recordings]
    pids = [rec.run.pid if rec.run else i for i, rec in enumerate(recs)]
    if len(set(pids)) != len(pids):
        raise ExportError(
            "two recordings are of the same process (pid "
            f"{next(p for p in pids if pids.count(p) > 1)}): export them into separate directories"
        )
    temp = out.parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
    try:
        temp.mkdir()
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror}") from None
    writers = _Writers(temp)
    manifest = {"gpuobs_parquet_schema_version": tables.SCHEMA_VERSION, "recordings": []}
    try:
        selections = []  # a Selection, or None for a windowed recording (selected as it is written)
        for source in recordings:
            if isinstance(source, WindowedRecording):
                selections.append(None)
                continue
            say(f"resolving launches of {source.path}")
            try:
                selections.append(select(source, criteria))
            except SelectionError as exc:
                raise ExportError(str(exc)) from None
        if criteria.restricts and all(sel is not None and sel.empty for sel in selections):
            raise ExportError(_selects_nothing(criteria, recordings))  # said before anything is written
        empty = []
        for source, sel, pid in zip(recordings, selections, pids):
            if sel is None:
                sel = _write_windowed(writers, source, criteria, pid, say)
            else:
                _write_recording(writers, sel, pid, say)
            empty.append(sel.empty)
            manifest["recordings"].append({"path": sel.rec.path, "pid": pid})
        if criteria.restricts and all(empty):
            raise ExportError(_selects_nothing(criteria, recordings))
        writers.close()
        manifest["tables"] = {name: rows for name, rows in writers.rows.items()}
        (temp / tables.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(temp, out)
    except BaseException as exc:
        writers.close(quiet=True)
        shutil.rmtree(temp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
        raise
    files = [p for p in out.rglob("*.parquet")]
    return ParquetSummary(out, dict(writers.rows), len(files), sum(p.stat().st_size for p in files))


def _selects_nothing(criteria: Criteria, recordings: list) -> str:
    return (
        f"{criteria.describe()} selects nothing of "
        + "; ".join(_span_text(source) for source in recordings)
        + " (`gpuobs info` shows spans and launch ids, `gpuobs stats` the kernels)"
    )


def _span_text(source) -> str:
    span = source.span() if isinstance(source, WindowedRecording) else device_span(source)
    path = source.path
    return f"{path} (it spans {format_span(0, span[1] - span[0])})" if span else f"{path} (no device times)"


def _check_target(out: Path, force: bool) -> None:
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ExportError(f"{out} is a symbolic link: gpuobs never writes through or replaces a link")
    if not stat.S_ISDIR(st.st_mode):
        raise ExportError(f"{out} exists and is not a directory: a Parquet export is a directory; choose another -o")
    if not (out / tables.MANIFEST).is_file():
        raise ExportError(
            f"{out} is a directory that no gpuobs Parquet export wrote (no {tables.MANIFEST}): "
            "gpuobs replaces only its own; choose another -o"
        )
    if not force:
        raise ExportError(f"{out} exists (an earlier Parquet export): add -f/--force to replace it")


def _write_recording(w: _Writers, sel: Selection, pid: int, say) -> None:
    rec = sel.rec
    _recording_row(w, rec, pid, sel.criteria)
    devices = _devices(rec, rec.event_chunk_devices)
    positions = node_positions(rec.launches) if len(rec.launches) else np.zeros(0, np.int64)
    for device in devices:
        say(f"writing GPU {device} of {rec.path}")
        names, clock, samples = _of_device(rec, pid, device)
        _launch_tables(w, sel, pid, device, names, clock, samples, positions)
        _events(w, sel, pid, device, names, clock, positions)
    w.every_table(pid, devices)
    _api_calls(w, rec, pid)


def _write_windowed(w: _Writers, wr: WindowedRecording, criteria: Criteria, pid: int, say) -> Selection:
    """_write_recording of a recording read window by window: one pass over its events,
    a row group at a time, writes the chosen blocks and samples and sums the launch
    table (analysis/launch_tally.py); the launches are written after it. Returns the
    Selection, without per-event masks."""
    rec = wr.rec
    _recording_row(w, rec, pid, criteria)
    devices = _devices(rec, [c.device for c in wr.chunks])
    positions = node_positions(rec.launches) if len(rec.launches) else np.zeros(0, np.int64)
    per_device = {device: _of_device(rec, pid, device) for device in devices}
    matched = matched_launches(rec, criteria)
    span = wr.span()
    window = time_window(criteria, span)
    tally, overlap = LaunchTally(rec), OverlapBound(wr)
    kept = 0
    done, total = 0, wr.event_count
    for seg in resolved_segments(wr, rows=ROW_GROUP_ROWS):
        chunk = wr.chunks[seg.chunk]
        tally.add(seg.events, seg.launch)
        overlap.add(chunk, seg.events)
        keep = event_mask(criteria, seg.events, seg.launch, window, matched)
        kept += int(keep.sum())
        names, clock, _ = per_device[chunk.device]
        _event_batch(
            w, rec, None, pid, chunk.device, names, clock, positions, seg.events, keep, seg.launch, chunk.flush
        )
        done += len(seg.events)
        say(f"writing the blocks of {rec.path}", done, total)
    overlap.check()
    table = tally.table(rec)
    _, launches = time_selection(rec, criteria, table, matched, span)
    events = np.zeros(0, bool) if kept == 0 else np.ones(1, bool)  # only whether any is kept
    sel = Selection(rec, criteria, None, table, matched, launches, events, window)
    for device in devices:
        names, clock, samples = per_device[device]
        _launch_tables(w, sel, pid, device, names, clock, samples, positions)
    w.every_table(pid, devices)
    _api_calls(w, rec, pid)
    return sel


def _recording_row(w: _Writers, rec: Recording, pid: int, criteria: Criteria) -> None:
    run = rec.run
    w.write(
        "recordings",
        pid,
        None,
        {
            "path": [rec.path],
            "mode": [run.mode_name if run else "unknown"],
            "sample_shift": [run.sample_shift if run else 0],
            "tool_version": [rec.tool_version],
            "format_version": [rec.format_version],
            "start_realtime_ns": [run.start_realtime_ns if run else 0],
            "start_monotonic_ns": [run.start_monotonic_ns if run else 0],
            "argv": [" ".join(run.argv) if run else ""],
            "complete": [rec.complete],
            "damaged_at": [rec.damage.offset if rec.damage else None],
            "selection": [criteria.describe()],
        },
    )


def _devices(rec: Recording, event_devices: list) -> list:
    return sorted(
        set(rec.devices["device_index"].tolist())
        | set(event_devices)
        | set(rec.launches["device_index"].tolist())
        | set(rec.flushes["device_index"].tolist())
    )


def _of_device(rec: Recording, pid: int, device: int) -> tuple:
    """(kernel names, clock relation, clock samples) of one GPU."""
    samples = rec.clock_samples[rec.clock_samples["device_index"] == device]
    clock = clock_relation(samples, pid, device, "auto")
    names = _Names(rec, device, rec.launches["function_slot"][rec.launches["device_index"] == device])
    return names, clock, samples


def _launch_tables(w, sel: Selection, pid, device, names, clock, samples, positions) -> None:
    """A GPU's kernels, launches, clock and flushes tables."""
    _kernels(w, sel.rec, pid, device)
    _launches(w, sel, pid, device, names, positions)
    _clock(w, samples, clock, pid, device)
    _flushes(w, sel.rec, pid, device)


def _api_calls(w: _Writers, rec: Recording, pid: int) -> None:
    if len(rec.api_calls):
        calls = rec.api_calls
        w.write(
            "api_calls",
            pid,
            None,
            {
                "call_id": calls["call_id"],
                "name": [rec.api_names.get(int(a), f"api#{int(a)}") for a in calls["api_id"]],
                "enter_ns": calls["enter_ns"],
                "exit_ns": calls["exit_ns"],
                "thread_id": calls["thread_id"],
                "depth": calls["depth"],
                "result": calls["result"],
            },
        )


def _kernels(w, rec, pid, device) -> None:
    infos = sorted((k[1], f) for k, f in rec.functions.items() if k[0] == device)
    w.write(
        "kernels",
        pid,
        device,
        {
            "function_slot": [slot for slot, _ in infos],
            "module_id": [f.module_id for _, f in infos],
            "kernel": [f.name for _, f in infos],
            "mangled": [f.mangled for _, f in infos],
        },
    )


def _launches(w, sel: Selection, pid, device, names: _Names, positions) -> None:
    rec, table = sel.rec, sel.table
    rows = np.flatnonzero((rec.launches["device_index"] == device) & sel.launches)
    if len(rows) == 0:
        return
    launch = rec.launches[rows]
    graph = (launch["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    spanned = table.blocks_recorded[rows] > 0
    first, last = table.first_start[rows], table.last_end[rows]
    if table.end_bound is not None:
        end_kind = [END_LABELS[int(q)] if ok else None for q, ok in zip(table.end_bound[rows], spanned)]
    else:
        end_kind = ["measured" if ok else None for ok in spanned]
    counted = table.counted[rows]
    w.write(
        "launches",
        pid,
        device,
        {
            "launch_id": launch["launch_id"],
            "kernel": names.of(launch["function_slot"]),
            "function_slot": launch["function_slot"],
            "grid_id": launch["grid_id"],
            "stream_id": launch["stream_id"],
            "host_begin_ns": launch["host_begin_ns"],
            "grid_x": launch["grid"][:, 0],
            "grid_y": launch["grid"][:, 1],
            "grid_z": launch["grid"][:, 2],
            "block_dim_x": launch["block"][:, 0],
            "block_dim_y": launch["block"][:, 1],
            "block_dim_z": launch["block"][:, 2],
            "flags": launch["flags"],
            "graph_replay": (launch["graph_launch_id"], ~graph),
            "graph_node": (positions[rows], ~graph),
            "launched_from_device": (launch["flags"] & schema.LaunchFlag.FROM_DEVICE) != 0,
            "api_call_id": launch["api_call_id"],
            "flush_seq": rec.launch_flushes[rows],
            "grid_blocks": table.grid_blocks[rows],
            "blocks_recorded": table.blocks_recorded[rows].astype(np.int64),
            "memory_samples": table.events_kept[rows].astype(np.int64),
            "counted": (counted, counted < 0),
            "count_shared_by": (table.counted_shared[rows], counted < 0),
            "first_start_ns": (first, ~spanned),
            "last_end_ns": (last, ~spanned),
            "span_ns": (np.maximum(last.astype(np.int64) - first.astype(np.int64), 0), ~spanned),
            "end_kind": end_kind,
        },
    )


def _clock(w, samples, clock, pid, device) -> None:
    if len(samples) == 0:
        return
    used = (samples["method"] == 1) & (samples["device_ns"] > 0) & clock.measured
    w.write(
        "clock",
        pid,
        device,
        {
            **{name: samples[name] for name in tables_columns("clock")[:7]},
            "used": used,
            "offset_ns": (np.full(len(samples), clock.offset_ns), np.full(len(samples), not clock.measured)),
            "uncertainty_ns": (
                np.full(len(samples), clock.uncertainty_ns),
                np.full(len(samples), not clock.measured),
            ),
            "realtime_offset_ns": (
                np.full(len(samples), clock.realtime_offset_ns),
                np.full(len(samples), not clock.measured),
            ),
        },
    )


def tables_columns(table: str) -> list:
    return [name for name, _, _ in tables.TABLES[table][1]]


def _flushes(w, rec, pid, device) -> None:
    index = np.flatnonzero(rec.flushes["device_index"] == device)
    if len(index) == 0:
        return
    f = rec.flushes[index]
    slots = {}
    for s in rec.slots[rec.slots["device_index"] == device]:
        slots[int(s["flush_seq"])] = s
    zero = np.zeros(len(f), np.uint64)

    def of_slots(name):
        if not slots:
            return zero
        return np.array([int(slots[int(q)][name]) if int(q) in slots else 0 for q in f["flush_seq"]], np.uint64)

    w.write(
        "flushes",
        pid,
        device,
        {
            "flush_seq": f["flush_seq"],
            "index": index.astype(np.uint32),
            **{name: f[name] for name in ("host_time_ns", *FLUSH_COUNTERS, "incomplete")},
            "warp_arrivals": of_slots("warp_arrivals"),
            "warp_arrivals_dropped": of_slots("warp_arrivals_dropped"),
            "device_quiet_ns": of_slots("device_quiet_ns"),
        },
    )
    counts = rec.launch_counts[rec.launch_counts["device_index"] == device]
    w.write(
        "launch_counts",
        pid,
        device,
        {name: counts[name] for name in ("flush_seq", "grid_id", "count", "launches_sharing")},
    )


def _events(w, sel: Selection, pid, device, names: _Names, clock, positions) -> None:
    """Blocks and memory samples of one GPU, chunk by chunk, a row group at a time."""
    rec = sel.rec
    start = 0
    for chunk, chunk_device, seq in zip(rec.event_chunks, rec.event_chunk_devices, rec.event_chunk_flushes):
        end = start + len(chunk)
        if chunk_device == device:
            for lo in range(start, end, ROW_GROUP_ROWS):
                hi = min(lo + ROW_GROUP_ROWS, end)
                batch = chunk[lo - start : hi - start]
                keep, launch_of = sel.events[lo:hi], sel.launch_of_event[lo:hi]
                ends = (
                    None if sel.table.block_ends is None else functools.partial(_bound_ends, sel.table.block_ends, lo)
                )
                _event_batch(w, rec, ends, pid, device, names, clock, positions, batch, keep, launch_of, seq)
        start = end


def _bound_ends(block_ends, lo: int, rows: np.ndarray) -> tuple:
    """block_starts: (end bound, end kind) of the blocks at rows lo + `rows` of rec.events."""
    at = block_ends.at(rows + lo)
    quality = block_ends.quality[at].astype(np.int32)
    words = [END_LABELS[q] for q in sorted(END_LABELS)]
    return block_ends.end_bound_ns[at], _dictionary(quality, words)


def _event_batch(w, rec, bound_ends, pid, device, names, clock, positions, ev, keep, launch_of, flush_seq) -> None:
    """The kept events of `ev` (one chunk's part, of flush window `flush_seq`), each of
    launch `launch_of` (-1: none). `bound_ends(rows)`: block_starts' end bounds of
    these rows of `ev` (None: the ends are recorded)."""
    launches = rec.launches
    for kind in (schema.EventKind.BLOCK, schema.EventKind.MEMORY):
        rows = np.flatnonzero(keep & (ev["kind"] == kind))
        if len(rows) == 0:
            continue
        whole = len(rows) == len(ev)  # the common case: every event of the part, no copy
        e = ev if whole else ev[rows]
        of = launch_of if whole else launch_of[rows]
        unresolved = of < 0
        launch_id = analysis.of_launch(launches["launch_id"], of, 0)
        if kind == schema.EventKind.MEMORY:
            t = e["time_start"]
            w.write(
                "memory_samples",
                pid,
                device,
                {
                    "launch_id": (launch_id, unresolved),
                    "kernel": names.of(e["function_slot"]),
                    "time_ns": t,
                    "time_monotonic_ns": _host(t, clock),
                    "sm": e["sm_id"],
                    "address": e["address"],
                    "pc": e["pc"],
                    "access_size": e["access_size"],
                    "access_flags": e["flags"],
                    "thread": e["thread_index"],
                    "block_x": e["block_x"],
                    "block_y": e["block_y"],
                    "block_z": e["block_z"],
                    "flush_seq": np.full(len(e), flush_seq, np.uint32),
                },
            )
            continue
        start = e["time_start"]
        if bound_ends is not None:  # block_starts: no end recorded, an upper bound of it
            end, end_kind = bound_ends(rows)
        else:
            end = np.maximum(e["time_end"], start)
            over = (e["flags"] & schema.BLOCK_END_UNCONFIRMED) != 0
            end_kind = _dictionary(over.astype(np.int32), ["measured", "unconfirmed"])
        flags = analysis.of_launch(launches["flags"], of, 0)
        graph = (flags & schema.LaunchFlag.GRAPH_NODE) != 0
        w.write(
            "blocks",
            pid,
            device,
            {
                "launch_id": (launch_id, unresolved),
                "kernel": names.of(e["function_slot"]),
                "function_slot": e["function_slot"],
                "grid_id": e["grid_id"],
                "block_x": e["block_x"],
                "block_y": e["block_y"],
                "block_z": e["block_z"],
                "sm": e["sm_id"],
                "start_ns": start,
                "end_ns": end,
                "start_monotonic_ns": _host(start, clock),
                "end_monotonic_ns": _host(end, clock),
                "end_kind": end_kind,
                "threads": e["thread_index"],
                "exit_count": e["exit_count"],
                "flags": e["flags"],
                "flush_seq": np.full(len(e), flush_seq, np.uint32),
                "graph_replay": (analysis.of_launch(launches["graph_launch_id"], of, 0), ~graph),
                "graph_node": (analysis.of_launch(positions, of, 0), ~graph),
            },
        )


def _host(device_ns: np.ndarray, clock):
    """Device ns on host CLOCK_MONOTONIC where the relation was measured; null elsewhere."""
    if not clock.measured:
        return (np.zeros(len(device_ns), np.int64), np.ones(len(device_ns), bool))
    host = device_ns.astype(np.int64) - np.int64(round(clock.offset_ns))
    return host
