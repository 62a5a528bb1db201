"""A separate run's host trace (PyTorch profiler or Nsight Systems) on its own
tracks, in its own clock (REALTIME), never merged into gpuobs's process or
device tracks: its pids label tracks, they never become process tracks."""
from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .clock import REALTIME
from .lanes import assign_lanes
from .protowire import Rows
from .trace_writer import SEQ_CLEARED, SEQ_NEEDS, TraceWriter

KIND_TITLES = {"pytorch-profiler": "PyTorch profiler", "nsys": "Nsight Systems"}


def _track_order(key: tuple):
    """Processes by pid, then GPUs by device (as the profiler's own view sorts them); in a
    process its threads by id, each thread's NVTX ranges after it."""
    kind, owner, lane = key
    def number_first(v):
        return (not isinstance(v, int), v if isinstance(v, int) else 0, str(v))
    return (kind == "stream", number_first(owner), number_first(lane), kind == "nvtx")


def _process_name(host, pid) -> str:
    name = host.process_names.get(pid, "").strip()
    if not isinstance(pid, int):
        return name or str(pid)  # Kineto's own pseudo-processes ("Spans")
    return f"{name} (pid {pid})" if name else f"pid {pid}"


def track_names(host, key: tuple) -> tuple[str, str]:
    """(process group, track) names of a host-trace track key, as the PyTorch profiler's
    trace names them in Perfetto: `python3 (pid 803)` / `thread 803 (python3)`, and
    `GPU 0` / `stream 7`; names from the trace's process_name and thread_name metadata."""
    kind, owner, lane = key
    thread = str(host.thread_names.get((owner, lane), "")).strip()
    if kind == "stream":
        return f"GPU {owner}", thread or f"stream {lane}"
    thread = thread or (f"thread {lane}" if isinstance(lane, int) else str(lane))
    if kind == "nvtx":
        return _process_name(host, owner), f"NVTX ({thread})"
    return _process_name(host, owner), thread


def write_host_trace(w: TraceWriter, host, related: bool, shift_ns: int = 0, residual_ns: int = 0,
                     matched: int = 0) -> int:
    """Returns the number of slices written. `related`: some GPU of this trace has
    measured snapshots with REALTIME, so REALTIME timestamps have a path to trace time."""
    how = ("on its own REALTIME clock" if related else
           "with no clock relation in this trace: trace time is its raw REALTIME ns")
    tool = KIND_TITLES.get(host.kind, host.kind)
    desc = (f"{host.path}: a separate, uninstrumented run ({tool}), {how}. "
            f"{matched} of its {len(host.kernels)} kernels matched gpuobs launches (name, grid, block, order).")
    title = f"{tool} run: {host.path.rsplit('/', 1)[-1]}"
    if shift_ns:
        title += " (shifted to line up kernels)"
        desc += (f" SHIFTED by {shift_ns / 1e6:+.3f} ms so that matched kernels line up with gpuobs's "
                 f"(--align kernels); median residual {residual_ns / 1e3:.1f} us.")
    group = w.track(title, description=desc)
    keys = sorted({e.track for e in host.events}, key=_track_order)
    key_index = {k: i for i, k in enumerate(keys)}
    ev = host.events
    if not ev:
        return 0
    grp = np.array([key_index[e.track] for e in ev], np.int64)
    start = np.array([e.start_ns + shift_ns for e in ev], np.int64)
    end = start + np.array([max(e.dur_ns, 0) for e in ev], np.int64)
    base = int(start.min())
    lane = assign_lanes(grp, (start - base).astype(np.uint64), (end - base).astype(np.uint64))
    uuid, processes = {}, {}
    for k in keys:
        process, label = track_names(host, k)
        if process not in processes:
            processes[process] = w.track(process, parent=group, rank=len(processes))
        for lane_no in range(int(lane[grp == key_index[k]].max()) + 1):
            uuid[(key_index[k], lane_no)] = w.track(label, parent=processes[process],
                                                    merge_key=f"{group}-{key_index[k]}", rank=key_index[k])
    names = sorted({e.name for e in ev})
    iid = {n: i + 1 for i, n in enumerate(names)}
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for n, i in iid.items():
        first.interned_data.event_names.add(iid=i, name=n)
    first.interned_data.debug_annotation_names.add(iid=1, name="category")
    w.packet(first)
    n = len(ev)
    marks = np.concatenate([start, end])
    rank = np.concatenate([np.ones(n), np.zeros(n)])
    order = np.lexsort((rank, marks))
    k = np.concatenate([np.arange(n), np.arange(n)])[order]
    begin = order < n
    tracks = np.array([uuid[(int(grp[j]), int(lane[j]))] for j in range(n)], np.uint64)[k]
    name_iid = np.array([iid[e.name] for e in ev], np.uint64)[k]
    te = (Rows(len(k)).varint_field(9, np.where(begin, pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END))
          .varint_field(11, tracks).varint_field(10, name_iid, present=begin))
    cat = Rows(len(k)).varint_field(1, 1).bytes_field(6, [ev[j].category.encode() for j in k], present=begin)
    te.message_field(4, cat, present=begin)
    packets = Rows(len(k)).varint_field(8, marks[order].astype(np.uint64))
    if related:
        packets.varint_field(58, REALTIME)
    w.rows(packets.message_field(11, te).varint_field(10, seq).varint_field(13, SEQ_NEEDS, present=begin))
    return n
