"""Recordings to one Perfetto trace: per GPU a track group on its own device
clock, a Kernels track, an SMs group with one track per SM (lanes merged into it),
memory-access counters, and drops where a user will see them."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .. import analysis, schema
from ..recording import Recording
from .api_tracks import flow_id, write_api_calls
from .blocks import BlockSlices, encode_blocks
from .clock import ClockRelation, clock_relation
from ..host_traces.matching import kernel_alignment, match_kernels
from .host_tracks import write_host_trace
from .lanes import assign_lanes
from .slice_encoder import Slices, write_slices
from .writer import SEQ_CLEARED, SEQ_NEEDS, TraceWriter

KERNEL_ARGS = ["launch", "grid", "block_dim", "stream", "blocks_recorded", "blocks_dropped", "counted",
               "count_shared_by", "graph_replay", "raced_flush", "uninstrumented_ns", "instrumentation_cost",
               "ends_unconfirmed"]


class ExportError(Exception):
    pass


@dataclass
class ExportOptions:
    kernels: Optional[str] = None        # regex on kernel names
    launches: Optional[str] = None       # "A:B" launch ids, A <= id < B
    time_window: Optional[str] = None    # "START:END" from the first event, with units (ns, us, ms, s)
    clock: str = "auto"                  # auto | device
    samples: bool = False                # raw memory samples as instants
    block_args: bool = True
    align: Optional[str] = None          # "kernels": shift host traces so matched kernels line up
    bins: int = 2000                     # counter bins across each GPU's span
    host_tracks: bool = True             # False: host traces only match kernels (the archive carries them)


@dataclass
class GpuSummary:
    label: str
    sms: int = 0
    lanes: int = 0
    block_slices: int = 0
    kernel_slices: int = 0
    launches_without_time: int = 0
    memory_events: int = 0
    accesses_counted: int = 0
    dropped: int = 0
    unrecorded_launches: int = 0  # outside recording windows: ran unpatched, not in the trace
    clock: str = ""
    flowed_launches: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    boot_realtime_ns: int | None = None  # REALTIME at this machine's boot (BOOTTIME 0), when measured


@dataclass
class ExportSummary:
    gpus: list = field(default_factory=list)
    api: list = field(default_factory=list)     # ApiSummary per recording with --api-trace calls
    hosts: list = field(default_factory=list)   # one dict per host trace: matching and per-kernel cost
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


_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise ExportError(f"time {text!r} is not a number with an optional unit (ns, us, ms, s)")
    return int(float(m.group(1)) * _UNITS[m.group(2) or "ns"])


def parse_range(text: str, what: str, parse=int) -> tuple[Optional[int], Optional[int]]:
    if ":" not in text:
        raise ExportError(f"{what} {text!r} must look like START:END (either side may be empty)")
    lo, hi = text.split(":", 1)
    try:
        return (parse(lo) if lo.strip() else None, parse(hi) if hi.strip() else None)
    except ValueError as exc:
        raise ExportError(f"{what} {text!r}: {exc}") from None


def _launch_filter(rec: Recording, opts: ExportOptions) -> np.ndarray:
    keep = np.ones(len(rec.launches), bool)
    if opts.kernels:
        try:
            pattern = re.compile(opts.kernels)
        except re.error as exc:
            raise ExportError(f"--kernels {opts.kernels!r} is not a valid regular expression: {exc}") from None
        names = [rec.function(int(l["device_index"]), int(l["function_slot"])) for l in rec.launches]
        keep &= np.array([bool(pattern.search(f.name) or pattern.search(f.mangled)) for f in names], bool)
    if opts.launches:
        lo, hi = parse_range(opts.launches, "--launches")
        ids = rec.launches["launch_id"].astype(np.int64)
        if lo is not None:
            keep &= ids >= lo
        if hi is not None:
            keep &= ids < hi
    return keep


def export(recordings: list[Recording], out_path, opts: ExportOptions | None = None,
           progress: Callable[[str], None] | None = None, hosts: list = ()) -> ExportSummary:
    opts = opts or ExportOptions()
    if opts.clock not in ("auto", "device"):
        raise ExportError(f"--clock {opts.clock!r} is not auto or device")
    if opts.align not in (None, "kernels"):
        raise ExportError(f"--align {opts.align!r}: only 'kernels' is known")
    say = progress or (lambda _msg: None)
    w = TraceWriter()
    summary = ExportSummary()
    matches = []  # (host, rec, table, KernelMatch)
    related = False
    for rec_index, rec in enumerate(recordings):
        say(f"resolving launches of {rec.path}")
        launch_of_event = analysis.launch_index_of_events(rec)
        table = analysis.launch_table(rec, launch_of_event)
        host_dur = {}
        for host in hosts:
            m = match_kernels(rec, table, host)
            matches.append((host, rec, table, m))
            host_dur.update({int(i): k.dur_ns for i, k in zip(m.launch_index, m.host_kernel)})
        keep_launch = _launch_filter(rec, opts)
        devices = sorted(set(rec.devices["device_index"].tolist()) | set(rec.event_devices.tolist())
                         | set(rec.launches["device_index"].tolist()))
        ev = rec.events
        window = _time_window(ev, opts)
        # --api-trace: flows from calls to kernel slices, on GPUs whose clock is related
        calls = np.unique(rec.api_calls["call_id"])
        flowed, rec_related = [], False
        for device in devices:
            say(f"encoding GPU {device} of {rec.path}")
            gpu = _export_gpu(w, rec, device, ev, launch_of_event, table, keep_launch, window, opts, host_dur,
                              calls, rec_index)
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
    summary.tracks = w.tracks
    try:
        summary.bytes = w.save(out_path)
    except OSError as exc:
        raise ExportError(f"cannot write {out_path}: {exc.strerror}") from None
    return summary


def _time_window(ev: np.ndarray, opts: ExportOptions):
    if not opts.time_window or len(ev) == 0:
        return None
    lo, hi = parse_range(opts.time_window, "--time-window", parse_duration)
    t0 = int(ev["time_start"].min())
    return (t0 + lo if lo is not None else 0, t0 + hi if hi is not None else np.iinfo(np.uint64).max)


def _export_host(w, host, matches, related, opts, boot_realtime_ns=None) -> dict:
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
        before_boot = sum(1 for e in host.events if e.start_ns + shift < boot_realtime_ns)
    return {"path": host.path, "events": len(host.events), "kernels": len(host.kernels), "matched": matched,
            "unmatched_gpuobs": best[3].unmatched_launches if best else 0,
            "unmatched_host": best[3].unmatched_host if best else len(host.kernels),
            "per_kernel": best[3].per_kernel if best else [], "shift_ns": shift, "residual_ns": residual,
            "clock": "REALTIME" if related else "none (raw REALTIME ns)", "before_boot": before_boot}


def _export_gpu(w: TraceWriter, rec: Recording, device: int, ev, launch_of_event, table, keep_launch, window,
                opts: ExportOptions, host_dur: dict | None = None, api_calls: np.ndarray | None = None,
                rec_index: int = 0) -> GpuSummary:
    pid = rec.run.pid if rec.run else 0
    clock = clock_relation(rec.clock_samples[rec.clock_samples["device_index"] == device], pid, device, opts.clock)
    name = rec.device_name(device)
    label = f"GPU {device}: {name}" + (f" (pid {pid})" if pid else "") + " - device clock"
    s = GpuSummary(label=label, clock=("measured, +/- %.1f us" % (clock.uncertainty_ns / 1e3)) if clock.measured
                   else "device (no host relation)")
    for snap in clock.snapshots():
        w.packet(snap)
    if clock.measured and len(clock.samples):
        s0 = clock.samples[0]
        s.boot_realtime_ns = ((int(s0["realtime_before"]) + int(s0["realtime_after"])) // 2
                              - (int(s0["boottime_before"]) + int(s0["boottime_after"])) // 2)
    gpu = w.track(label, description=clock.describe() + _drop_note(rec, device) + _window_note(rec, device))

    on_device = rec.event_devices == device
    resolved = launch_of_event >= 0
    sel = on_device & (~resolved | keep_launch[np.maximum(launch_of_event, 0)])
    if opts.kernels or opts.launches:
        sel &= resolved
    if window is not None:
        sel &= (ev["time_start"] >= window[0]) & (ev["time_start"] < window[1])
    is_block = ev["kind"] == schema.EventKind.BLOCK
    blocks = np.flatnonzero(sel & is_block)
    mem = np.flatnonzero(sel & (ev["kind"] == schema.EventKind.MEMORY))

    names, iid_of_slot = _kernel_names(rec, device)
    dev_launches = np.flatnonzero((rec.launches["device_index"] == device) & keep_launch)
    s.kernel_slices, s.launches_without_time, timed = _kernel_slices(w, rec, gpu, dev_launches, table, names,
                                                                     iid_of_slot, clock, window, host_dur or {},
                                                                     api_calls if clock.measured else None,
                                                                     rec_index)
    if api_calls is not None and len(api_calls) and clock.measured:
        s.flowed_launches = timed[np.isin(rec.launches["api_call_id"][timed], api_calls)]
    if len(blocks):
        s.sms, s.lanes = _block_tracks_and_slices(w, rec, gpu, ev, blocks, launch_of_event, names, iid_of_slot,
                                                  clock, opts)
        s.block_slices = len(blocks)
    if len(mem):
        s.memory_events = len(mem)
        s.accesses_counted = _memory_counters(w, rec, gpu, ev, mem, launch_of_event, table, clock, opts)
    s.dropped = int(rec.flushes["dropped"][rec.flushes["device_index"] == device].sum())
    s.unrecorded_launches = int(rec.flushes["unrecorded_launches"][rec.flushes["device_index"] == device].sum())
    _drop_counter(w, rec, gpu, device, ev, clock)
    return s


def _drop_note(rec: Recording, device: int) -> str:
    f = rec.flushes[rec.flushes["device_index"] == device]
    dropped = int(f["dropped"].sum())
    if dropped == 0:
        return " No records were dropped."
    return (f" {dropped:,} of {int(f['attempted'].sum()):,} records were DROPPED (buffer full; counted on the "
            f"device): see the 'Dropped records' counter and each kernel's blocks_dropped.")


def _window_note(rec: Recording, device: int) -> str:
    n = int(rec.flushes["unrecorded_launches"][rec.flushes["device_index"] == device].sum())
    if n == 0:
        return ""
    return (f" Recorded in windows: {n:,} kernel launches and graph replays ran outside them, unpatched, and are "
            "not in this trace (gaps between kernels may be theirs).")


def _kernel_names(rec: Recording, device: int):
    in_events = rec.events["function_slot"][rec.event_devices == device]
    slots = sorted({k[1] for k in rec.functions if k[0] == device} |
                   set(rec.launches["function_slot"][rec.launches["device_index"] == device].tolist()) |
                   set(np.flatnonzero(np.bincount(in_events)).tolist() if len(in_events) else []))
    iid_of_slot = {slot: i + 1 for i, slot in enumerate(slots)}
    names = {iid: rec.function(device, slot).name for slot, iid in iid_of_slot.items()}
    return names, iid_of_slot


def _ts(pkt: pb.TracePacket, t: int, clock: ClockRelation) -> None:
    pkt.timestamp = int(t)
    if clock.measured:
        pkt.timestamp_clock_id = clock.clock_id


def _kernel_slices(w, rec, gpu, launches, table, names, iid_of_slot, clock, window, host_dur, api_calls=None,
                   rec_index=0):
    has_time = table.first_start[launches] > 0
    if window is not None:
        has_time &= (table.first_start[launches] >= window[0]) & (table.first_start[launches] < window[1])
    timed = launches[has_time]
    missing = int((~has_time).sum())
    if len(timed) == 0:
        return 0, missing, timed
    start = table.first_start[timed]
    end = np.maximum(table.last_end[timed], start)
    lane = assign_lanes(np.zeros(len(timed), np.int64), start, end)
    lanes = [w.track("Kernels", parent=gpu, rank=0, merge_key=f"kernels-{gpu}",
                     description="One slice per launch: its first block's start to its last block's end.")
             for _ in range(int(lane.max()) + 1)]
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for iid, name in names.items():
        first.interned_data.event_names.add(iid=iid, name=name)
    for i, arg in enumerate(KERNEL_ARGS, start=1):
        first.interned_data.debug_annotation_names.add(iid=i, name=arg)
    w.packet(first)
    slices = _kernel_slice_table(rec, table, timed, start, end, np.asarray(lanes, np.uint64)[lane], iid_of_slot,
                                 host_dur, api_calls, rec_index)
    write_slices(w, slices, seq, clock.clock_id if clock.measured else None)
    return len(timed), missing, timed


def _kernel_slice_table(rec, table, timed, start, end, track, iid_of_slot, host_dur, api_calls=None,
                        rec_index=0) -> Slices:
    """The kernel slices with their arguments (names interned as KERNEL_ARGS)."""
    l = rec.launches[timed]
    recorded = table.blocks_recorded[timed].astype(np.int64)
    counted = table.counted[timed]
    shared = table.counted_shared[timed]
    graph = (l["flags"] & 1).astype(bool)
    raced = (l["flags"] & 2).astype(bool)
    arg = {a: j for j, a in enumerate(KERNEL_ARGS, start=1)}
    s = Slices(track, start, end, np.array([iid_of_slot[int(x)] for x in l["function_slot"]], np.uint64))
    dims = lambda a: ["x".join(str(int(v)) for v in row).encode() for row in a]  # noqa: E731
    s.int_arg(arg["launch"], l["launch_id"].astype(np.int64))
    s.string_arg(arg["grid"], dims(l["grid"]))
    s.string_arg(arg["block_dim"], dims(l["block"]))
    s.string_arg(arg["stream"], [hex(int(v)).encode() for v in l["stream_id"]])
    s.int_arg(arg["blocks_recorded"], recorded)
    s.int_arg(arg["blocks_dropped"], np.maximum(table.grid_blocks[timed] - recorded, 0), present=recorded > 0)
    s.int_arg(arg["counted"], counted, present=counted >= 0)
    s.int_arg(arg["count_shared_by"], shared, present=shared > 1)
    s.int_arg(arg["graph_replay"], l["graph_launch_id"].astype(np.int64), present=graph)
    unconfirmed = table.ends_unconfirmed[timed].astype(np.int64)
    s.int_arg(arg["ends_unconfirmed"], unconfirmed, present=unconfirmed > 0)
    s.bool_arg(arg["raced_flush"], present=raced)
    if host_dur:  # the same launch in a separate, uninstrumented run (--host)
        unins = np.array([host_dur.get(int(x), -1) for x in timed], np.int64)
        has = unins > 0
        s.int_arg(arg["uninstrumented_ns"], unins, present=has)
        spans = (table.last_end[timed].astype(np.int64) - table.first_start[timed].astype(np.int64))
        s.string_arg(arg["instrumentation_cost"],
                     [f"{sp / u:.2f}x".encode() if u > 0 else b"" for sp, u in zip(spans, unins)], present=has)
    if api_calls is not None and len(api_calls):  # the end of the flow from the API call that made this launch
        s.flows_in(flow_id(rec_index, l["launch_id"]), np.isin(l["api_call_id"], api_calls))
    return s


def _block_tracks_and_slices(w, rec, gpu, ev, blocks, launch_of_event, names, iid_of_slot, clock, opts):
    every = len(blocks) == len(ev)  # the common case: no filter, so columns need no gather

    def col(name):
        return ev[name] if every else ev[name][blocks]

    sm = col("sm_id").astype(np.int64)
    start = col("time_start")
    end = np.maximum(col("time_end"), start)
    lane = assign_lanes(sm, start, end)
    sms_group = w.track("SMs", parent=gpu, rank=1, explicit_order=True,
                        description="One track per SM, in SM order; blocks that overlap on an SM sit on lanes "
                                    "merged into its track. A block runs from its leader's entry to its last "
                                    "thread's exit.")
    # Lane tracks of an SM get consecutive uuids, so a block's track is first[sm] + lane.
    lanes_of_sm = np.zeros(int(sm.max()) + 1, np.int64)
    np.maximum.at(lanes_of_sm, sm, lane + 1)
    first = np.zeros(len(lanes_of_sm), np.uint64)
    lane0 = {}
    for s_id in np.flatnonzero(lanes_of_sm):
        for k in range(int(lanes_of_sm[s_id])):
            uuid = w.track(f"SM {int(s_id)}", parent=sms_group, rank=int(s_id), merge_key=f"sm-{int(s_id)}")
            if k == 0:
                first[s_id] = uuid
                lane0[int(s_id)] = uuid
    uuid_arr = first[sm] + lane.astype(np.uint64)
    lo = launch_of_event if every else launch_of_event[blocks]
    launch_ids = np.where(lo >= 0, rec.launches["launch_id"][np.maximum(lo, 0)].astype(np.int64), -1)
    slots = col("function_slot")
    slot_iid = np.zeros(int(slots.max()) + 1, np.uint64)
    for slot, iid in iid_of_slot.items():
        if slot < len(slot_iid):
            slot_iid[slot] = iid
    b = BlockSlices(sm=sm, start=start, end=end, lane_uuid=uuid_arr, name_iid=slot_iid[slots], launch_id=launch_ids,
                    block_x=col("block_x"), block_y=col("block_y"), block_z=col("block_z"))
    encode_blocks(w, b, names, lane0, clock, opts.block_args)
    return len(lane0), int(lanes_of_sm.sum())


def _counter_packets(w, track, times, values, clock):
    seq = w.new_sequence()
    for t, v in zip(times, values):
        pkt = pb.TracePacket(trusted_packet_sequence_id=seq)
        _ts(pkt, int(t), clock)
        pkt.track_event.type = pb.TrackEvent.TYPE_COUNTER
        pkt.track_event.track_uuid = track
        pkt.track_event.double_counter_value = float(v)
        w.packet(pkt)


def _memory_counters(w, rec, gpu, ev, mem, launch_of_event, table, clock, opts) -> int:
    """Accesses per time bin: each kept sample stands for counted/kept accesses of
    its launch, so each launch's bins add up to its exact count."""
    lo = launch_of_event[mem]
    kept = np.where(lo >= 0, table.events_kept[np.maximum(lo, 0)], 0)
    counted = np.where(lo >= 0, table.counted[np.maximum(lo, 0)], -1)
    shared = np.where(lo >= 0, table.counted_shared[np.maximum(lo, 0)], 0)
    exact = (counted >= 0) & (shared == 1) & (kept > 0)
    weight = np.where(exact, counted / np.maximum(kept, 1), 1.0)
    t = ev["time_start"][mem].astype(np.int64)
    t0, t1 = int(t.min()), int(t.max()) + 1
    width = max(1000, (t1 - t0) // max(opts.bins, 1))
    bins = (t - t0) // width
    sums = np.bincount(bins, weights=weight)
    track = w.track("Global accesses per bin", parent=gpu, rank=2, counter_unit="accesses",
                    description=f"Accesses per {width:,} ns bin. Each launch's exact device count is spread over "
                                "its sampled accesses' times, so a launch's bins add up to its count.")
    times = t0 + np.arange(len(sums) + 1) * width
    _counter_packets(w, track, times, np.r_[sums, 0.0], clock)
    if opts.samples:
        _memory_samples(w, gpu, ev, mem, clock)
    counted_launches = np.unique(lo[(lo >= 0)])
    return int(np.clip(table.counted[counted_launches], 0, None).sum())


def _memory_samples(w, gpu, ev, mem, clock):
    track = w.track("Memory samples", parent=gpu, rank=3,
                    description="The captured accesses themselves (address, pc, size, flags, thread).")
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


def _drop_counter(w, rec, gpu, device, ev, clock) -> None:
    """Per flush window: the records it dropped, from its first to its last event."""
    flushes = rec.flushes[rec.flushes["device_index"] == device]
    if int(flushes["dropped"].sum()) == 0:
        return
    on = rec.event_devices == device
    fl = rec.event_flushes
    track = w.track("Dropped records", parent=gpu, rank=4, counter_unit="records",
                    description="Records the device could not keep (buffer full), per flush window.")
    times, values = [], []
    for f in flushes:
        m = on & (fl == f["flush_seq"])
        if not m.any():
            continue
        times += [int(ev["time_start"][m].min()), int(np.maximum(ev["time_end"][m], ev["time_start"][m]).max())]
        values += [int(f["dropped"]), 0]
    order = np.argsort(times, kind="stable")
    _counter_packets(w, track, np.array(times)[order], np.array(values)[order], clock)
