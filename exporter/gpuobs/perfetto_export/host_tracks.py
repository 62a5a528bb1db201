"""A separate run's host trace (PyTorch profiler or Nsight Systems) on its own
tracks, in its own clock (REALTIME), never merged into gpuobs's process or
device tracks: its pids label tracks, they never become process tracks."""

from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .clock import REALTIME
from .lanes import lane_tracks
from .slice_encoder import Slices, write_slices
from .trace_writer import SEQ_CLEARED, TraceWriter

KIND_TITLES = {"pytorch-profiler": "PyTorch profiler", "nsys": "Nsight Systems"}
CATEGORY_IID = 1  # the interned name of the one debug annotation, "category"


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


def write_host_trace(
    w: TraceWriter, host, related: bool, shift_ns: int = 0, residual_ns: int = 0, matched: int = 0
) -> int:
    """Returns the number of slices written. `related`: some GPU of this trace has
    measured snapshots with REALTIME, so REALTIME timestamps have a path to trace time."""
    how = (
        "on its own REALTIME clock"
        if related
        else "with no clock relation in this trace: trace time is its raw REALTIME ns"
    )
    tool = KIND_TITLES.get(host.kind, host.kind)
    desc = (
        f"{host.path}: a separate, uninstrumented run ({tool}), {how}. "
        f"{matched} of its {len(host.kernels)} kernels matched gpuobs launches (name, grid, block, order)."
    )
    title = f"{tool} run: {host.path.rsplit('/', 1)[-1]}"
    if shift_ns:
        title += " (shifted to line up kernels)"
        desc += (
            f" SHIFTED by {shift_ns / 1e6:+.3f} ms so that matched kernels line up with gpuobs's "
            f"(--align kernels); median residual {residual_ns / 1e3:.1f} us."
        )
    group = w.track(title, description=desc)
    ev = host.events
    if not len(ev):
        return 0
    used = np.unique(ev["track"])
    order_of = sorted(used.tolist(), key=lambda t: _track_order(host.tracks[t]))
    keys = [host.tracks[t] for t in order_of]
    rank_of_track = np.zeros(len(host.tracks), np.int64)
    rank_of_track[order_of] = np.arange(len(order_of))
    grp = rank_of_track[ev["track"]]
    start = ev["start_ns"] + shift_ns
    end = np.maximum(ev["dur_ns"], 0)
    end += start
    processes = {}

    def new_track(key_index: int) -> int:
        process, label = track_names(host, keys[key_index])
        if process not in processes:
            processes[process] = w.track(process, parent=group, rank=len(processes))
        return w.track(label, parent=processes[process], merge_key=f"{group}-{key_index}", rank=key_index)

    base = int(start.min())
    if base < 0:  # lanes take times from 0 (shifted before 1970)
        tracks = lane_tracks(grp, (start - base).astype(np.uint64), (end - base).astype(np.uint64), new_track)
    else:  # the same lanes: they are placed from the least start whatever it is
        tracks = lane_tracks(grp, start.view(np.uint64), end.view(np.uint64), new_track)
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for i, name in enumerate(host.names):
        first.interned_data.event_names.add(iid=i + 1, name=name)
    first.interned_data.debug_annotation_names.add(iid=CATEGORY_IID, name="category")
    w.packet(first)
    del grp
    # Views, not copies (the same bits as astype): a 4x nsys export held two more columns of every event.
    names = ev["name"].astype(np.uint64)
    names += np.uint64(1)
    slices = Slices(tracks.of_slice, start.view(np.uint64), end.view(np.uint64), names)
    slices.choice_arg(CATEGORY_IID, [c.encode() for c in host.categories], ev["category"])
    write_slices(w, slices, seq, clock_id=REALTIME if related else None)
    return len(ev)
