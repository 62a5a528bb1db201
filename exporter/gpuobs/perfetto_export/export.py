"""Recordings to one Perfetto trace: per GPU a track group on its own device
clock, a Kernels track, an SMs group with one track per SM (lanes merged into it),
memory-access counters, and drops where a user will see them."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..analysis import launches as analysis
from ..analysis import sampling
from ..analysis.kernel_names import slice_names
from ..background_writes import BackgroundWrites
from ..errors import ExportError, SelectionError
from ..host_traces.matching import kernel_alignment, match_kernels
from ..outputs import start_writeback
from ..ranges import format_span
from ..recording_file import schema
from ..recording_file.recording import Recording
from ..recording_file.windows import WindowedRecording
from ..selection import Criteria, Selection, matched_launches, select
from . import block_bounds, streamed
from .api_tracks import flow_id, write_api_calls
from .blocks import BlockSlices, encode_blocks
from .clock import ClockRelation, clock_relation, rows_where
from .host_tracks import write_host_trace
from .lanes import lane_tracks
from .slice_encoder import Slices, write_slices
from .trace_writer import SEQ_CLEARED, SEQ_NEEDS, TraceWriter

KERNEL_ARGS = [
    "launch",
    "grid",
    "block_dim",
    "stream",
    "blocks_recorded",
    "blocks_dropped",
    "counted",
    "count_shared_by",
    "graph_replay",
    "raced_flush",
    "uninstrumented_ns",
    "instrumentation_cost",
    "ends_unconfirmed",
    "launched_from_device",
    "listed_from_node_table",
    "conditional_runs",
    "graph_node",
    "kernels",
    "kernel",  # the full demangled signature; the slice's name is its short, unique form
]

SLICE_NAME_WIDTH = 90  # characters of a kernel slice's name (the UI cuts it to the slice's width anyway)
KERNEL_END_ARG = len(KERNEL_ARGS) + 1  # block_starts: "end" (interned only there)
SMS_DESCRIPTION = (
    "One track per SM, in SM order; blocks that overlap on an SM sit on lanes merged into its track. "
    "A block runs from its leader's entry to its last thread's exit."
)


__all__ = ["ExportError", "ExportOptions", "export"]


@dataclass
class ExportOptions:
    kernels: Optional[str] = None  # regex on kernel names
    launches: Optional[str] = None  # "A:B" launch ids, A <= id < B
    time_window: Optional[str] = None  # "START:END" from the recording's first event, with units (ns, us, ms, s)
    clock: str = "auto"  # auto | device
    samples: bool = False  # raw memory samples as instants
    block_args: bool = True
    align: Optional[str] = None  # "kernels": shift host traces so matched kernels line up
    bins: int = 2000  # counter bins across each GPU's span
    host_tracks: bool = True  # False: host traces only match kernels (the archive carries them)

    def criteria(self) -> Criteria:
        """The selection these options ask for (selection.py, TimeMeaning.STARTS_IN)."""
        try:
            return Criteria.parse(kernels=self.kernels, launches=self.launches, time=self.time_window)
        except SelectionError as exc:
            raise ExportError(str(exc)) from None


@dataclass
class GpuSummary:
    label: str
    mode: str = "unknown"
    sms: int = 0
    lanes: int = 0
    block_slices: int = 0
    kernel_slices: int = 0
    launches_without_time: int = 0
    memory_events: int = 0
    accesses_counted: int = 0  # exact device counts of the exported launches (each counter slot once)
    accesses_unplaced: int = 0  # of those, by launches without a kept sample: no time, not on the counter
    launches_unplaced: int = 0
    dropped: int = 0
    unrecorded_launches: int = 0  # outside recording windows: recorded nothing, not in the trace
    end_bounds: dict = field(default_factory=dict)  # block_starts: block slices per bound label (block_ends.LABELS)
    ends_unconfirmed: int = 0  # block_trace: block slices drawn at their start (a later run stamped their end)
    clock: str = ""
    flowed_launches: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    boot_realtime_ns: int | None = None  # REALTIME at this machine's boot (BOOTTIME 0), when measured
    damaged_at: int | None = None  # read with --salvage: the byte where the kept part ends


@dataclass
class HostSummary:
    """One --host trace: how its kernels matched the recording's, and where it was placed."""

    path: str
    events: int
    kernels: int
    matched: int
    unmatched_gpuobs: int
    unmatched_host: int
    per_kernel: list  # rows: kernel, matched, uninstrumented_us, instrumented_us, ratio
    shift_ns: int
    residual_ns: int
    clock: str
    before_boot: int  # events Perfetto drops: before the recording machine's boot


class _ChunkSpool:
    """TraceWriter's list of encoded chunks, kept in a temporary file past SPOOL_BYTES held
    in memory: the trace being written is not also held whole (730 MB for 16M blocks).
    The bytes, and so the trace, are the same as a list's. Each spill is written on a
    thread of its own (BackgroundWrites) while the next chunks are encoded; wait() before
    the file is read or written otherwise."""

    SPOOL_BYTES = 16 << 20  # held, and as much again being written: 32 MB, as one 32 MB spill held before

    def __init__(self, target=None):
        self.held: list = []
        self.held_bytes = 0
        self.total = 0
        self.file = target  # an open output file: spilled into it, in order, not copied at the end
        self.owned = target is None
        self.written_back = 0  # the output's bytes whose writeback to disk has been started
        self.writes = None if target is None else self._writes()

    def _writes(self) -> BackgroundWrites:
        # the output, fsynced at the end: its disk writes start now, beside the encoding
        return BackgroundWrites(self.file, None if self.owned else self._write_back)

    def _write_back(self) -> None:
        self.written_back = start_writeback(self.file, self.written_back)

    def append(self, chunk) -> None:
        self.held.append(chunk)
        self.held_bytes += len(chunk)
        self.total += len(chunk)
        if self.held_bytes > self.SPOOL_BYTES:
            if self.file is None:
                self.file = tempfile.TemporaryFile()
                self.owned = True
                self.writes = self._writes()
            self.writes.write(self.held)
            self.held, self.held_bytes = [], 0

    def wait(self) -> None:
        """Every spill written (errors raised here): the file is the caller's again."""
        if self.writes is not None:
            self.writes.wait()

    def __iter__(self):
        if self.file is not None:
            self.wait()
            self.file.flush()
            self.file.seek(0)
            while True:
                block = self.file.read(8 << 20)
                if not block:
                    break
                yield block
        yield from self.held

    def close(self) -> None:
        if self.writes is not None:
            self.writes.join()  # before the file is closed, here or by its owner; an error was raised or is moot
        if self.file is not None and self.owned:
            self.file.close()


class _SpoolingWriter(TraceWriter):
    def __init__(self, target=None):
        super().__init__()
        self._chunks = _ChunkSpool(target)

    def size(self) -> int:
        return self._chunks.total

    def save(self, target) -> int:
        spool = self._chunks
        if spool.file is not None and spool.file is target:  # what spilled is written there already
            spool.wait()
            target.writelines(spool.held)
            return spool.total
        return super().save(target)


# The Perfetto UI holds 2-4x a trace's size in the browser's memory: a 182 MB trace of 4M blocks
# took 42 s to load in UI v52, one of 730 MB (16M blocks) 163 s and a renderer past 5.5 GB.
UI_COMFORTABLE_BYTES = 150_000_000


def ui_advice(summary: "ExportSummary", recordings: list) -> list:
    """What to do instead, when a trace is past what the Perfetto UI opens comfortably."""
    if summary.bytes <= UI_COMFORTABLE_BYTES:
        return []
    spans = [_span_text(rec) for rec in recordings]
    return [
        f"the trace is {summary.bytes / 1e6:,.0f} MB ({summary.block_slices:,} block slices): the Perfetto UI "
        f"needs minutes and several GB to open past ~{UI_COMFORTABLE_BYTES / 1e6:.0f} MB. Export a window "
        f"instead (--time-window 0ms:10ms; {'; '.join(spans)}), share a part (gpuobs trim REC --time A:B -o "
        "part.gpuobs), or query all of it as tables (--format parquet, docs/parquet-schema.md)"
    ]


@dataclass
class ExportSummary:
    gpus: list = field(default_factory=list)  # GpuSummary per GPU of each recording
    api: list = field(default_factory=list)  # ApiSummary per recording with --api-trace calls
    hosts: list = field(default_factory=list)  # HostSummary per host trace
    tracks: int = 0
    bytes: int = 0

    @property
    def block_slices(self):
        return sum(g.block_slices for g in self.gpus)

    @property
    def kernel_slices(self):
        return sum(g.kernel_slices for g in self.gpus)

    @property
    def clock_related(self) -> bool:
        """Some GPU's device clock has a measured relation to the host clocks."""
        return any(g.clock.startswith("measured") for g in self.gpus)


@dataclass
class GpuExport:
    """One GPU of one recording while it is written: what every step of its export reads.
    The recording's part (launches, filters, host matches) is the same for all its GPUs."""

    w: TraceWriter
    rec: Recording
    rec_index: int  # the recording's place in the export (flow ids)
    device: int
    opts: ExportOptions
    selection: Selection  # what --kernels, --launches and --time-window keep of the recording
    host_dur: dict  # launch index -> its duration in the uninstrumented --host run
    api_calls: np.ndarray  # --api-trace call ids of the recording
    windows: Optional[WindowedRecording] = None  # the streamed export's source (its events; streamed.py)
    clock: ClockRelation = field(init=False)
    names: dict = field(init=False)  # name iid -> kernel name
    iid_of_slot: dict = field(init=False)
    track: int = 0  # the GPU's group track, once written

    @property
    def launch_of_event(self) -> np.ndarray:  # index into rec.launches per event, -1 unresolved
        return self.selection.launch_of_event

    @property
    def table(self) -> analysis.LaunchTable:
        return self.selection.table

    @property
    def keep_launch(self) -> np.ndarray:  # per launch: passes --kernels and --launches
        return self.selection.matched

    @property
    def window(self) -> Optional[tuple]:  # --time-window on the device clock, or None
        return self.selection.window

    def __post_init__(self):
        pid = self.rec.run.pid if self.rec.run else 0
        samples = self.rec.clock_samples
        mine = rows_where(samples, samples["device_index"] == self.device)
        self.clock = clock_relation(mine, pid, self.device, self.opts.clock)
        self.names, self.iid_of_slot = _kernel_names(self.rec, self.device, self.windows)

    @property
    def ev(self) -> np.ndarray:
        return self.rec.events

    @property
    def flow_calls(self) -> Optional[np.ndarray]:
        """The API calls whose flows end on this GPU's kernel slices: none unless its clock is related."""
        return self.api_calls if self.clock.measured and len(self.api_calls) else None


def export(
    recordings: list[Recording],
    out_path,
    opts: ExportOptions | None = None,
    progress: Callable | None = None,
    hosts: list = (),
) -> ExportSummary:
    opts = opts or ExportOptions()
    if opts.clock not in ("auto", "device"):
        raise ExportError(f"--clock {opts.clock!r} is not auto or device")
    if opts.align not in (None, "kernels"):
        raise ExportError(f"--align {opts.align!r}: only 'kernels' is known")
    say = progress or (lambda *_: None)
    # Into an open output file the trace spills as it is encoded (a path is written at the end).
    w = _SpoolingWriter(out_path if hasattr(out_path, "write") and hasattr(out_path, "seek") else None)
    criteria = opts.criteria()
    if criteria.by_launch:  # said before any launch is resolved
        matched = [matched_launches(_rec_of(rec), criteria) for rec in recordings]
        if not any(m.any() for m in matched):
            raise ExportError(_nothing_selected([_rec_of(r) for r in recordings], opts))
    streamed_selections = []
    try:
        return _export_all(w, recordings, out_path, opts, say, hosts, criteria, streamed_selections)
    finally:
        for selection in streamed_selections:
            selection.close()
        # on every way out: no spill still being written when the caller has its file back
        w._chunks.close()


def _rec_of(source) -> Recording:
    return source.rec if isinstance(source, WindowedRecording) else source


def _export_all(w, recordings, out_path, opts, say, hosts, criteria, streamed_selections) -> ExportSummary:
    summary = ExportSummary()
    matches = []  # (host, rec, table, KernelMatch)
    related = False
    for rec_index, source in enumerate(recordings):
        windows = source if isinstance(source, WindowedRecording) else None
        rec = _rec_of(source)
        say(f"resolving launches of {rec.path}")
        if windows is not None:  # a window of events at a time, the chosen blocks spooled (streamed.py)
            selection = streamed.select(windows, criteria, say)
            streamed_selections.append(selection)
            event_devices = {c.device for c in windows.chunks if c.count}
        else:
            selection = select(rec, criteria)
            event_devices = set(rec.event_devices.tolist())
        host_dur = {}
        for host in hosts:
            m = match_kernels(rec, selection.table, host)
            matches.append((host, rec, selection.table, m))
            host_dur.update({int(i): k.dur_ns for i, k in zip(m.launch_index, m.host_kernel)})
        devices = sorted(
            set(rec.devices["device_index"].tolist()) | event_devices | set(rec.launches["device_index"].tolist())
        )
        # --api-trace: flows from calls to kernel slices, on GPUs whose clock is related
        calls = np.unique(rec.api_calls["call_id"])
        flowed, rec_related = [], False
        for device in devices:
            say(f"encoding GPU {device} of {rec.path}")
            gpu = _export_gpu(
                GpuExport(
                    w=w,
                    rec=rec,
                    rec_index=rec_index,
                    device=device,
                    opts=opts,
                    selection=selection,
                    host_dur=host_dur,
                    api_calls=calls,
                    windows=windows,
                )
            )
            rec_related |= gpu.clock.startswith("measured")
            summary.gpus.append(gpu)
            flowed.append(gpu.flowed_launches)
        if len(rec.api_calls):
            say(f"encoding the CUDA API calls of {rec.path}")
            flowed_all = np.concatenate(flowed) if flowed else np.zeros(0, np.int64)
            summary.api.append(write_api_calls(w, rec, rec_index, rec_related, flowed_all))
        related |= rec_related
    boot = next((g.boot_realtime_ns for g in summary.gpus if g.boot_realtime_ns is not None), None)
    for host in hosts:
        summary.hosts.append(_export_host(w, host, [m for m in matches if m[0] is host], related, opts, boot))
    if opts.time_window and not any(g.block_slices or g.kernel_slices or g.memory_events for g in summary.gpus):
        spans = "; ".join(_span_text(rec) for rec in recordings)
        raise ExportError(f"--time-window {opts.time_window} excludes everything ({spans})")
    summary.tracks = w.tracks
    try:
        summary.bytes = w.save(out_path)
    except OSError as exc:
        if hasattr(out_path, "write"):
            raise  # an open file's owner (gpuobs.outputs) reports it
        raise ExportError(f"cannot write {out_path}: {exc.strerror}") from None
    return summary


def _span_text(source) -> str:
    if isinstance(source, WindowedRecording):
        rec, span = source.rec, source.span()
    else:
        rec, ev = source, source.events
        span = None
        if len(ev):
            span = (int(ev["time_start"].min()), int(np.maximum(ev["time_end"], ev["time_start"]).max()))
    if span is None:
        mode = rec.run.mode_name if rec.run else "unknown"
        return f"{rec.path} has no device times (mode {mode})"
    return f"{rec.path} spans {format_span(0, span[1] - span[0])}"


def _nothing_selected(recordings: list, opts: ExportOptions) -> str:
    what = " and ".join(
        f"{flag} {value!r}" for flag, value in (("--kernels", opts.kernels), ("--launches", opts.launches)) if value
    )
    kernels = len({name for rec in recordings for name in rec.launch_names()})
    launches = sum(len(rec.launches) for rec in recordings)
    ids = (
        [int(rec.launches["launch_id"].min()) for rec in recordings if len(rec.launches)],
        [int(rec.launches["launch_id"].max()) for rec in recordings if len(rec.launches)],
    )
    id_range = f", launch ids {min(ids[0])}..{max(ids[1])}" if ids[0] else ""
    return (
        f"{what} selects none of the {launches:,} launches of {kernels:,} kernels{id_range} "
        "(`gpuobs stats` lists the kernels, `gpuobs info` the launch ids)"
    )


def _export_host(w, host, matches, related, opts, boot_realtime_ns=None) -> HostSummary:
    best = max(matches, key=lambda m: len(m[3].launch_index), default=None)
    shift = residual = 0
    matched = len(best[3].launch_index) if best else 0
    if opts.align == "kernels" and best and matched:
        _host, rec, table, m = best
        device = int(rec.launches["device_index"][m.launch_index[0]])
        pid = rec.run.pid if rec.run else 0
        clock = clock_relation(rec.clock_samples[rec.clock_samples["device_index"] == device], pid, device, "auto")
        shift, residual = kernel_alignment(rec, table, m, clock)
    if opts.host_tracks:
        write_host_trace(w, host, related, shift, residual, matched)
    # Trace time is BOOTTIME; Perfetto drops what converts to before the boot of the
    # recording machine (a host run from an earlier boot, or another machine).
    before_boot = 0
    if related and boot_realtime_ns is not None:
        before_boot = int((host.events["start_ns"] + shift < boot_realtime_ns).sum())
    return HostSummary(
        path=host.path,
        events=len(host.events),
        kernels=len(host.kernels),
        matched=matched,
        unmatched_gpuobs=best[3].unmatched_launches if best else 0,
        unmatched_host=best[3].unmatched_host if best else len(host.kernels),
        per_kernel=best[3].per_kernel if best else [],
        shift_ns=shift,
        residual_ns=residual,
        clock="REALTIME" if related else "none (raw REALTIME ns)",
        before_boot=before_boot,
    )


def _export_gpu(g: GpuExport) -> GpuSummary:
    w, rec, device, ev, clock = g.w, g.rec, g.device, g.ev, g.clock
    pid = rec.run.pid if rec.run else 0
    name = rec.device_name(device)
    label = f"GPU {device}: {name}" + (f" (pid {pid})" if pid else "") + " - device clock"
    s = GpuSummary(
        label=label,
        mode=rec.run.mode_name if rec.run else "unknown",
        clock=("measured, +/- %.1f us" % (clock.uncertainty_ns / 1e3))
        if clock.measured
        else "device (no host relation)",
        damaged_at=rec.damage.offset if rec.damage else None,
    )
    for packets in clock.snapshot_packets():
        w.raw(packets)
    if clock.measured and len(clock.samples):
        s0 = clock.samples[0]
        s.boot_realtime_ns = (int(s0["realtime_before"]) + int(s0["realtime_after"])) // 2 - (
            int(s0["boottime_before"]) + int(s0["boottime_after"])
        ) // 2
    g.track = w.track(
        _gpu_group_name(device, name, pid),
        explicit_order=True,  # Kernels, Graph replays, counters, then SMs (by rank), not by name
        description=f"{label}. "
        + clock.describe()
        + _drop_note(rec, device)
        + _window_note(rec, device)
        + _sampling_note(rec, device),
    )

    if g.windows is not None:  # streamed.py: blocks in a spool, no memory events
        blocks, mem = None, np.zeros(0, np.int64)
    else:
        sel = (rec.event_devices == device) & g.selection.events
        is_block = ev["kind"] == schema.EventKind.BLOCK
        blocks = np.flatnonzero(sel & is_block)
        mem = np.flatnonzero(sel & (ev["kind"] == schema.EventKind.MEMORY))

    dev_launches = np.flatnonzero((rec.launches["device_index"] == device) & g.keep_launch)
    s.kernel_slices, s.launches_without_time, timed = _kernel_slices(g, dev_launches)
    _graph_replay_slices(g, timed)
    if g.flow_calls is not None:
        s.flowed_launches = timed[np.isin(rec.launches["api_call_id"][timed], g.flow_calls)]
    spool = g.selection.spools.get(device) if g.windows is not None else None
    if spool is not None:
        s.sms, s.lanes = _streamed_block_tracks_and_slices(g, spool)
        s.block_slices = sum(spool.counts.values())
        s.ends_unconfirmed = spool.unconfirmed
    elif blocks is not None and len(blocks):
        if g.table.block_ends is None:
            s.ends_unconfirmed = int(np.count_nonzero(ev["flags"][blocks] & schema.BLOCK_END_UNCONFIRMED))
        s.sms, s.lanes = _block_tracks_and_slices(g, blocks, s.ends_unconfirmed > 0)
        s.block_slices = len(blocks)
        s.end_bounds = block_bounds.counts(g.table.block_ends, blocks)
    if len(mem):
        s.memory_events = len(mem)
        _memory_counters(g, mem)
    if s.mode.startswith("mem"):
        s.accesses_counted, s.accesses_unplaced, s.launches_unplaced = _access_totals(
            g, dev_launches, g.launch_of_event[mem]
        )
    s.dropped = int(rec.flushes["dropped"][rec.flushes["device_index"] == device].sum())
    s.unrecorded_launches = int(rec.flushes["unrecorded_launches"][rec.flushes["device_index"] == device].sum())
    _drop_counter(g)
    return s


def _gpu_group_name(device: int, name: str, pid: int) -> str:
    """`GPU 0 H200 (pid 6061)`: short enough for the UI's track-name column (about 30
    characters at 1600 px); the clock and the rest are in the group's description."""
    short = name.removeprefix("NVIDIA ").strip() or name
    return f"GPU {device} {short}" + (f" (pid {pid})" if pid else "")


def _drop_note(rec: Recording, device: int) -> str:
    f = rec.flushes[rec.flushes["device_index"] == device]
    dropped = int(f["dropped"].sum())
    if dropped == 0:
        return " No records were dropped."
    return (
        f" {dropped:,} of {int(f['attempted'].sum()):,} records were DROPPED (buffer full; counted on the "
        f"device): see the 'Dropped records' counter and each kernel's blocks_dropped."
    )


def _window_note(rec: Recording, device: int) -> str:
    n = int(rec.flushes["unrecorded_launches"][rec.flushes["device_index"] == device].sum())
    if n == 0:
        return ""
    return (
        f" Recorded in windows: {n:,} kernel launches and graph replays ran outside them (or outside a duty cycle's "
        "on time), recording nothing, and are not in this trace (gaps between kernels may be theirs)."
    )


def _sampling_note(rec: Recording, device: int) -> str:
    mine = rec.sampling[rec.sampling["device_index"] == device]
    out = int(mine["sampled_out"].sum())
    d = sampling.sampling(rec)
    if d is not None and d["duty_on_device"]:
        return (
            f" Duty cycle: recorded {sampling.duty_text(d)}; outside it nothing was counted or recorded"
            + (
                f", and {out:,} blocks (or accesses) were counted but not recorded by {sampling.budget_text(d)}"
                if out
                else ""
            )
            + "; launches running across an edge have part of their blocks."
        )
    if out == 0:
        return ""
    return (
        f" Sampled: {out:,} blocks (or accesses) were counted but not recorded, by {sampling.rule_text(d)}; the "
        "slices are the stretches of time the tool's sample gate was open, and launches running across a turn "
        "have part of their blocks."
    )


def _kernel_names(rec: Recording, device: int, windows: Optional[WindowedRecording] = None):
    if windows is None:
        in_events = rec.events["function_slot"][rec.event_devices == device]
        event_slots = set(np.flatnonzero(np.bincount(in_events)).tolist() if len(in_events) else [])
    else:  # the slots the reader's index saw in the GPU's events
        event_slots = {int(i) for c in windows.chunks if c.device == device for i in c.slots.tolist()}
    slots = sorted(
        {k[1] for k in rec.functions if k[0] == device}
        | set(rec.launches["function_slot"][rec.launches["device_index"] == device].tolist())
        | event_slots
    )
    iid_of_slot = {slot: i + 1 for i, slot in enumerate(slots)}
    full = [rec.function(device, slot).name for slot in slots]
    names = dict(zip(iid_of_slot.values(), slice_names(full, SLICE_NAME_WIDTH)))
    return names, iid_of_slot


def _ts(pkt: pb.TracePacket, t: int, clock: ClockRelation) -> None:
    pkt.timestamp = int(t)
    if clock.measured:
        pkt.timestamp_clock_id = clock.clock_id


def _kernel_slices(g: GpuExport, launches: np.ndarray):
    w, table, window = g.w, g.table, g.window
    has_time = table.first_start[launches] > 0
    unread = getattr(g.selection, "unread", None)  # streamed: launches in windows not read
    known = ~unread[launches] if unread is not None else True
    missing = int((~has_time & known).sum())  # no device time at all (counting modes), not those outside a window
    if window is not None:
        has_time &= (table.first_start[launches] >= window[0]) & (table.first_start[launches] < window[1])
    timed = launches[has_time]
    if len(timed) == 0:
        return 0, missing, timed
    start = table.first_start[timed]
    end = np.maximum(table.last_end[timed], start)
    bounded = table.end_bound is not None  # block_starts: kernel ends are upper bounds too
    description = (
        block_bounds.KERNELS_DESCRIPTION
        if bounded
        else "One slice per launch: its first block's start to its last block's end."
    )
    tracks = _lanes_of_one_track(g, "Kernels", 0, "kernels", description, start, end)
    arg_names = dict(enumerate(KERNEL_ARGS, start=1))
    if bounded:
        arg_names[KERNEL_END_ARG] = "end"
    seq = _slice_sequence(g, g.names, arg_names)
    write_slices(w, _kernel_slice_table(g, timed, start, end, tracks.of_slice), seq, _clock_id(g))
    return len(timed), missing, timed


def _lanes_of_one_track(g: GpuExport, name: str, rank: int, key: str, description: str, start, end):
    """Lanes for slices that all belong on one named track of the GPU's group."""
    return lane_tracks(
        np.zeros(len(start), np.int64),
        start,
        end,
        lambda _: g.w.track(name, parent=g.track, rank=rank, merge_key=f"{key}-{g.track}", description=description),
    )


def _slice_sequence(g: GpuExport, event_names: dict, arg_names: dict) -> int:
    """A new packet sequence whose first packet interns these names (iid -> name)."""
    seq = g.w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for iid, name in event_names.items():
        first.interned_data.event_names.add(iid=iid, name=name)
    for iid, name in arg_names.items():
        first.interned_data.debug_annotation_names.add(iid=iid, name=name)
    g.w.packet(first)
    return seq


def _clock_id(g: GpuExport):
    return g.clock.clock_id if g.clock.measured else None


def node_positions(launch: np.ndarray) -> np.ndarray:
    """Each graph node launch's position in its replay, in launch order (the order the
    replay's kernels were listed: a learned table keeps its learning replay's order)."""
    replay = launch["graph_launch_id"].astype(np.int64)
    order = np.lexsort((launch["launch_id"], replay))
    first = np.ones(len(order), bool)
    first[1:] = replay[order][1:] != replay[order][:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order)) - group_start
    return pos


def _graph_replay_slices(g: GpuExport, timed: np.ndarray) -> int:
    """One slice per graph replay on a "Graph replays" track: from its first kernel's
    first block to its last kernel's last block (device clock)."""
    launch = g.rec.launches[timed]
    graph = (launch["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    if not graph.any():
        return 0
    rows = timed[graph]
    replay = g.rec.launches["graph_launch_id"][rows].astype(np.int64)
    ids, group, kernels = np.unique(replay, return_inverse=True, return_counts=True)
    start = np.full(len(ids), np.iinfo(np.uint64).max, np.uint64)
    end = np.zeros(len(ids), np.uint64)
    np.minimum.at(start, group, g.table.first_start[rows])
    np.maximum.at(end, group, np.maximum(g.table.last_end[rows], g.table.first_start[rows]))
    description = "One slice per CUDA-graph replay: its first kernel's first block to its last kernel's last block."
    tracks = _lanes_of_one_track(g, "Graph replays", 1, "replays", description, start, end)
    arg = {a: j for j, a in enumerate(KERNEL_ARGS, start=1)}
    seq = _slice_sequence(g, {1: "graph replay"}, {arg[a]: a for a in ("graph_replay", "kernels")})
    slices = Slices(tracks.of_slice, start, end, np.ones(len(ids), np.uint64))
    slices.int_arg(arg["graph_replay"], ids).int_arg(arg["kernels"], kernels)
    write_slices(g.w, slices, seq, _clock_id(g))
    return len(ids)


def _kernel_slice_table(g: GpuExport, timed, start, end, track) -> Slices:
    """The kernel slices with their arguments (names interned as KERNEL_ARGS)."""
    rec, table, iid_of_slot, host_dur = g.rec, g.table, g.iid_of_slot, g.host_dur
    launch = rec.launches[timed]
    recorded = table.blocks_recorded[timed].astype(np.int64)
    graph = (launch["flags"] & schema.LaunchFlag.GRAPH_NODE).astype(bool)
    raced = (launch["flags"] & schema.LaunchFlag.RACED_FLUSH).astype(bool)
    arg = {a: j for j, a in enumerate(KERNEL_ARGS, start=1)}
    s = Slices(track, start, end, np.array([iid_of_slot[int(x)] for x in launch["function_slot"]], np.uint64))

    def dims(a):
        return ["x".join(str(int(v)) for v in row).encode() for row in a]

    s.int_arg(arg["launch"], launch["launch_id"].astype(np.int64))
    full_names = [rec.function(g.device, slot).name.encode() for slot in iid_of_slot]
    s.choice_arg(arg["kernel"], full_names, s.name_iid.astype(np.int64) - 1)  # iids are 1.. in slot order
    s.string_arg(arg["grid"], dims(launch["grid"]))
    s.string_arg(arg["block_dim"], dims(launch["block"]))
    s.string_arg(arg["stream"], [hex(int(v)).encode() for v in launch["stream_id"]])
    s.int_arg(arg["blocks_recorded"], recorded)
    s.int_arg(arg["blocks_dropped"], np.maximum(table.grid_blocks[timed] - recorded, 0), present=recorded > 0)
    s.int_arg(arg["counted"], table.counted[timed], at_least=0)  # -1: not counted
    s.int_arg(arg["count_shared_by"], table.counted_shared[timed], at_least=2)
    s.int_arg(arg["graph_replay"], launch["graph_launch_id"].astype(np.int64), present=graph)
    s.int_arg(arg["graph_node"], node_positions(launch), present=graph)
    s.int_arg(arg["ends_unconfirmed"], table.ends_unconfirmed[timed], at_least=1)
    s.bool_arg(arg["raced_flush"], present=raced)
    # A grid a kernel launched (listed from its records; its sizes are what they show), and a
    # graph replay's node listed from its exec's learned node table (no per-node callback ran).
    s.bool_arg(arg["launched_from_device"], present=(launch["flags"] & schema.LaunchFlag.FROM_DEVICE) != 0)
    s.bool_arg(arg["listed_from_node_table"], present=(launch["flags"] & schema.LaunchFlag.FROM_NODE_TABLE) != 0)
    # A kernel inside a conditional node's body: one slice per replay for all its runs, and how many (-1: unknown).
    body = (launch["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    s.int_arg(arg["conditional_runs"], analysis.conditional_runs(rec, table)[timed], present=body)
    if host_dur:  # the same launch in a separate, uninstrumented run (--host)
        unins = np.array([host_dur.get(int(x), -1) for x in timed], np.int64)
        has = unins > 0
        s.int_arg(arg["uninstrumented_ns"], unins, present=has)
        spans = table.last_end[timed].astype(np.int64) - table.first_start[timed].astype(np.int64)
        s.string_arg(
            arg["instrumentation_cost"],
            [f"{sp / u:.2f}x".encode() if u > 0 else b"" for sp, u in zip(spans, unins)],
            present=has,
        )
    if table.end_bound is not None:  # block_starts: which bound the kernel's end is
        s.choice_arg(KERNEL_END_ARG, block_bounds.NOTE_CHOICES, table.end_bound[timed])
    if g.flow_calls is not None:  # the end of the flow from the API call that made this launch
        s.flows_in(flow_id(g.rec_index, launch["launch_id"]), np.isin(launch["api_call_id"], g.flow_calls))
    return s


# Past this many blocks, a GPU's blocks are encoded a group of whole SMs at a time (each SM is
# its own packet sequence either way), so that what is held while encoding stays bounded.
BATCH_BLOCKS = 1 << 20


def _block_tracks_and_slices(g: GpuExport, blocks: np.ndarray, any_unconfirmed: bool):
    """any_unconfirmed: block_trace, whether some block's end a later run stamped (the
    caller counted them)."""
    sms_group = g.w.track(
        "SMs", parent=g.track, rank=5, explicit_order=True, description=_sms_description(g, any_unconfirmed)
    )
    if len(blocks) <= BATCH_BLOCKS:
        return _encode_block_batch(g, blocks, sms_group)
    sm = g.ev["sm_id"][blocks]
    by_sm = np.argsort(sm, kind="stable")  # each SM's blocks keep their order
    sm_sorted = sm[by_sm]
    sm_starts = np.flatnonzero(np.r_[True, sm_sorted[1:] != sm_sorted[:-1]])
    cuts = _batch_cuts(sm_starts)
    sms = lanes = 0
    for lo, hi in zip([0] + cuts, cuts + [len(blocks)]):
        n_sms, n_lanes = _encode_block_batch(g, blocks[by_sm[lo:hi]], sms_group)
        sms, lanes = sms + n_sms, lanes + n_lanes
    return sms, lanes


def _sms_description(g: GpuExport, any_unconfirmed: bool) -> str:
    """What the SM tracks' block slices mean: block_starts' bounds, or block_trace's
    measured ends (with what a mark means only where a block carries it: traces of
    recordings without any stay as they were)."""
    if g.table.block_ends is not None:
        return block_bounds.SMS_DESCRIPTION
    return block_bounds.TRACE_SMS_DESCRIPTION if any_unconfirmed else SMS_DESCRIPTION


def _unconfirmed_ends(flags: np.ndarray) -> Optional[np.ndarray]:
    """Per block (record flags): whether a later run of its grid id stamped its end
    (tool/late_ends.h); None where no block's was."""
    late = (flags & schema.BLOCK_END_UNCONFIRMED) != 0
    return late if late.any() else None


def _batch_cuts(sm_starts) -> list:
    """Where batches of whole SMs begin (past the first), from where each SM's blocks
    begin in SM order: a batch closes at the first SM that starts BATCH_BLOCKS or more
    blocks after the batch's start."""
    cuts, first = [], 0
    for i in sm_starts[1:]:
        if i - first >= BATCH_BLOCKS:
            cuts.append(int(i))
            first = i
    return cuts


def _streamed_block_tracks_and_slices(g: GpuExport, spool: streamed.SmSpool):
    """_block_tracks_and_slices over the streamed export's spool: the same batches of
    whole SMs, each read back from the spool when it is encoded."""
    description = _sms_description(g, spool.unconfirmed > 0)
    sms_group = g.w.track("SMs", parent=g.track, rank=5, explicit_order=True, description=description)
    order = sorted(spool.counts)
    counts = [spool.counts[s] for s in order]
    total = sum(counts)
    starts = np.cumsum([0] + counts[:-1]).tolist()
    cuts = _batch_cuts(starts) if total > BATCH_BLOCKS else []
    first_sm = [starts.index(c) for c in cuts]
    sms = lanes = 0
    for lo, hi in zip([0] + first_sm, first_sm + [len(order)]):
        b = spool.read(order[lo:hi])
        streamed.check_overlap(g.windows, g.device, b, g.selection.overlap)
        launch_ids = analysis.of_launch(g.rec.launches["launch_id"].astype(np.int64), b["launch"], -1)
        start = b["time_start"]
        n_sms, n_lanes = _encode_block_columns(
            g,
            sms_group,
            b["sm_id"].astype(np.int64),
            start,
            np.maximum(b["time_end"], start),
            None,
            launch_ids,
            b["function_slot"],
            (b["block_x"], b["block_y"], b["block_z"]),
            _unconfirmed_ends(b["flags"]),
        )
        sms, lanes = sms + n_sms, lanes + n_lanes
    return sms, lanes


def _encode_block_batch(g: GpuExport, blocks: np.ndarray, sms_group: int):
    """The lane tracks and block slices of `blocks` (every block of an SM in one batch)."""
    rec, ev, launch_of_event = g.rec, g.ev, g.launch_of_event
    every = len(blocks) == len(ev)  # the common case: no filter, so columns need no gather

    def col(name):
        return ev[name] if every else ev[name][blocks]

    sm = col("sm_id").astype(np.int64)
    start = col("time_start")
    end = np.maximum(col("time_end"), start)
    bounds = g.table.block_ends  # block_starts: no end recorded, each bounded
    quality = unconfirmed = None
    if bounds is not None:
        at = bounds.at(blocks)
        end, quality = bounds.end_bound_ns[at], bounds.quality[at]
    else:
        unconfirmed = _unconfirmed_ends(col("flags"))
    lo = launch_of_event if every else launch_of_event[blocks]
    launch_ids = analysis.of_launch(rec.launches["launch_id"].astype(np.int64), lo, -1)
    xyz = (col("block_x"), col("block_y"), col("block_z"))
    slots = col("function_slot")
    return _encode_block_columns(g, sms_group, sm, start, end, quality, launch_ids, slots, xyz, unconfirmed)


def _encode_block_columns(
    g: GpuExport, sms_group: int, sm, start, end, quality, launch_ids, slots, xyz, unconfirmed=None
):
    """Lane tracks and block slices of one batch of whole SMs, given its columns.
    unconfirmed: block_trace, per block whether a later run stamped its end (or None)."""
    if len(sm) == 0:  # a streamed batch whose SMs kept no block in the time window
        return 0, 0
    w = g.w
    if unconfirmed is not None:
        # A later run's stamp says nothing of when this block ended. The same block's next
        # run start bounds it, but for a replay's last run that is the next replay (36 ms
        # on the H100 while-graph recording) and it needs every run of the grid, across
        # SMs and so across batches: the block is drawn from its start alone, as the
        # analysis counts it, and its lanes are given on that end.
        end = np.where(unconfirmed, start, end)
    tracks = lane_tracks(
        sm, start, end, lambda s_id: w.track(f"SM {s_id}", parent=sms_group, rank=s_id, merge_key=f"sm-{s_id}")
    )
    slot_iid = np.zeros(int(slots.max()) + 1, np.uint64)
    for slot, iid in g.iid_of_slot.items():
        if slot < len(slot_iid):
            slot_iid[slot] = iid
    names, name_iid = g.names, slot_iid[slots]
    if quality is not None:  # weaker bounds under their own names, so Perfetto colours them apart
        names, stride = block_bounds.bounded_names(g.names)
        name_iid = block_bounds.bounded_name_iids(name_iid, quality, stride)
    if unconfirmed is not None:  # marked, under their own names, so Perfetto colours them apart
        names, stride = block_bounds.unconfirmed_names(g.names)
        name_iid = block_bounds.unconfirmed_name_iids(name_iid, unconfirmed, stride)
    b = BlockSlices(
        sm=sm,
        start=start,
        end=end,
        lane_uuid=tracks.of_slice,
        name_iid=name_iid,
        launch_id=launch_ids,
        block_x=xyz[0],
        block_y=xyz[1],
        block_z=xyz[2],
        end_quality=quality,
        end_unconfirmed=unconfirmed,
    )
    encode_blocks(w, b, names, tracks.first, g.clock, g.opts.block_args)
    return len(tracks.first), int(tracks.lanes.sum())


def _counter_packets(g: GpuExport, track, times, values):
    seq = g.w.new_sequence()
    for t, v in zip(times, values):
        pkt = pb.TracePacket(trusted_packet_sequence_id=seq)
        _ts(pkt, int(t), g.clock)
        pkt.track_event.type = pb.TrackEvent.TYPE_COUNTER
        pkt.track_event.track_uuid = track
        pkt.track_event.double_counter_value = float(v)
        g.w.packet(pkt)


def _access_totals(g: GpuExport, launches: np.ndarray, sample_launches: np.ndarray) -> tuple[int, int, int]:
    """The device's exact access counts of the exported launches (every counter slot
    once, as `info` and `stats` count them), and the part of them by launches that kept
    no sample: those have no time, so the counter cannot show them. A window selects
    launches by their samples' times, so launches without a sample are then not exported."""
    rec, table = g.rec, g.table
    sampled = np.unique(sample_launches[sample_launches >= 0])
    if g.window is not None:
        return analysis.counted_total(rec, table, sampled), 0, 0
    if g.selection.criteria.by_launch:
        total = analysis.counted_total(rec, table, launches)
    else:  # every count of the device, also one no launch in the table claims
        slots = analysis.count_slots(rec)
        on_device = rec.launch_counts["device_index"] == g.device
        total = int(analysis.slot_counts(rec)[np.unique(slots[on_device])].sum()) if on_device.any() else 0
    unsampled = np.setdiff1d(launches, sampled)
    unsampled = unsampled[table.count_slot[unsampled] >= 0]
    slots = np.setdiff1d(table.count_slot[unsampled], table.count_slot[sampled])
    unplaced = int(analysis.slot_counts(rec)[slots].sum()) if len(slots) else 0
    return total, unplaced, int(len(unsampled))


def _memory_counters(g: GpuExport, mem: np.ndarray) -> None:
    """Accesses per time bin: each kept sample stands for counted/kept accesses of
    its launch, so each launch's bins add up to its exact count."""
    ev, table, opts = g.ev, g.table, g.opts
    lo = g.launch_of_event[mem]
    kept = analysis.of_launch(table.events_kept, lo, 0)
    counted = analysis.of_launch(table.counted, lo, -1)
    shared = analysis.of_launch(table.counted_shared, lo, 0)
    exact = (counted >= 0) & (shared == 1) & (kept > 0)
    weight = np.where(exact, counted / np.maximum(kept, 1), 1.0)
    t = ev["time_start"][mem].astype(np.int64)
    t0, t1 = int(t.min()), int(t.max()) + 1
    width = max(1000, (t1 - t0) // max(opts.bins, 1))
    bins = (t - t0) // width
    sums = np.bincount(bins, weights=weight)
    track = g.w.track(
        "Global accesses per bin",
        parent=g.track,
        rank=2,
        counter_unit="accesses",
        description=f"Accesses per {width:,} ns bin. Each launch's exact device count is spread over "
        "its sampled accesses' times, so a launch's bins add up to its count.",
    )
    times = t0 + np.arange(len(sums) + 1) * width
    _counter_packets(g, track, times, np.r_[sums, 0.0])
    if opts.samples:
        _memory_samples(g, mem)


def _memory_samples(g: GpuExport, mem: np.ndarray):
    w, ev, clock = g.w, g.ev, g.clock
    track = w.track(
        "Memory samples",
        parent=g.track,
        rank=3,
        description="The captured accesses themselves (address, pc, size, flags, thread).",
    )
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    first.interned_data.event_names.add(iid=1, name="access")
    w.packet(first)
    for i in mem:
        e = ev[i]
        pkt = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_NEEDS)
        _ts(pkt, int(e["time_start"]), clock)
        te = pkt.track_event
        te.type = pb.TrackEvent.TYPE_INSTANT
        te.track_uuid = track
        te.name_iid = 1
        te.debug_annotations.add(name="address", string_value=hex(int(e["address"])))
        te.debug_annotations.add(name="pc", string_value=hex(int(e["pc"])))
        te.debug_annotations.add(name="size", int_value=int(e["access_size"]))
        te.debug_annotations.add(name="flags", int_value=int(e["flags"]))
        te.debug_annotations.add(name="thread", int_value=int(e["thread_index"]))
        te.debug_annotations.add(name="sm", int_value=int(e["sm_id"]))
        w.packet(pkt)


def _drop_counter(g: GpuExport) -> None:
    """Per flush window: the records it dropped, from its first to its last event."""
    rec, device = g.rec, g.device
    flushes = rec.flushes[rec.flushes["device_index"] == device]
    if int(flushes["dropped"].sum()) == 0:
        return
    track = g.w.track(
        "Dropped records",
        parent=g.track,
        rank=4,
        counter_unit="records",
        description="Records the device could not keep (buffer full), per flush window.",
    )
    times, values = [], []
    for f, span in zip(flushes, _window_spans(g, flushes)):
        if span is None:
            continue
        times += list(span)
        values += [int(f["dropped"]), 0]
    order = np.argsort(times, kind="stable")
    _counter_packets(g, track, np.array(times)[order], np.array(values)[order])


def _window_spans(g: GpuExport, flushes) -> list:
    """Per flush window of the GPU: (first start, last end) of its events, None without any."""
    if g.windows is not None:  # from the reader's index
        spans = []
        for f in flushes:
            chunks = [c for c in g.windows.chunks if c.device == g.device and c.flush == f["flush_seq"] and c.count]
            spans.append((min(c.min_start for c in chunks), max(c.max_end for c in chunks)) if chunks else None)
        return spans
    ev, on, fl = g.ev, g.rec.event_devices == g.device, g.rec.event_flushes
    spans = []
    for f in flushes:
        m = on & (fl == f["flush_seq"])
        spans.append(
            (int(ev["time_start"][m].min()), int(np.maximum(ev["time_end"][m], ev["time_start"][m]).max()))
            if m.any()
            else None
        )
    return spans
