"""A separate run's host trace (PyTorch profiler or Nsight Systems) on its own
tracks, in its own clock (REALTIME), never merged into gpuobs's process or
device tracks: its pids label tracks, they never become process tracks."""
from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .clock import REALTIME
from .lanes import assign_lanes
from .slice_encoder import Slices, write_slices
from .writer import SEQ_CLEARED, TraceWriter

KIND_TITLES = {"pytorch-profiler": "PyTorch profiler", "nsys": "Nsight Systems"}
CATEGORY_IID = 1  # the interned name of the one debug annotation, "category"


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
    keys = sorted({e.track for e in host.events}, key=lambda k: (k[0], str(k[1]), str(k[2])))
    key_index = {k: i for i, k in enumerate(keys)}
    ev = host.events
    if not ev:
        return 0
    grp = np.array([key_index[e.track] for e in ev], np.int64)
    start = np.array([e.start_ns + shift_ns for e in ev], np.int64)
    end = start + np.array([max(e.dur_ns, 0) for e in ev], np.int64)
    base = int(start.min())
    lane = assign_lanes(grp, (start - base).astype(np.uint64), (end - base).astype(np.uint64))
    uuid = {}
    for k in keys:
        label = (f"GPU {k[1]} stream {k[2]} (uninstrumented)" if k[0] == "stream" else
                 f"NVTX {k[2]} (pid {k[1]})" if k[0] == "nvtx" else
                 f"{host.thread_names.get((k[1], k[2])) or 'thread'} {k[2]} (pid {k[1]})")
        for lane_no in range(int(lane[grp == key_index[k]].max()) + 1):
            uuid[(key_index[k], lane_no)] = w.track(label, parent=group, merge_key=f"{group}-{key_index[k]}",
                                                    rank=key_index[k])
    names = sorted({e.name for e in ev})
    iid = {n: i + 1 for i, n in enumerate(names)}
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for n, i in iid.items():
        first.interned_data.event_names.add(iid=i, name=n)
    first.interned_data.debug_annotation_names.add(iid=CATEGORY_IID, name="category")
    w.packet(first)
    tracks = np.array([uuid[(int(grp[j]), int(lane[j]))] for j in range(len(ev))], np.uint64)
    slices = Slices(tracks, start.astype(np.uint64), end.astype(np.uint64),
                    np.array([iid[e.name] for e in ev], np.uint64))
    slices.string_arg(CATEGORY_IID, [e.category.encode() for e in ev])
    write_slices(w, slices, seq, clock_id=REALTIME if related else None)
    return len(ev)
