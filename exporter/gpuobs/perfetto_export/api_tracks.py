"""The recorded process's own CUDA API calls (`gpuobs record --api-trace`) on host
tracks, on the host clock (CLOCK_MONOTONIC), with a flow from each call to the
kernel slices of the launches it made. The device clock and the host clock meet
only through the measured clock snapshots the GPU groups carry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..recording_file.recording import Recording
from .clock import MONOTONIC
from .lanes import lane_tracks
from .slice_encoder import Slices, write_slices
from .trace_writer import SEQ_CLEARED, TraceWriter

RUNTIME_DOMAIN = 2  # Sanitizer_CallbackDomain of the runtime API (the driver's is 1)
ARG_NAMES = {"result": 1, "domain": 2}  # interned debug annotation names


def flow_id(rec_index: int, launch_id) -> np.ndarray:
    """Trace-wide flow ids: launch ids are per process, so the recording's place
    in the export goes in the high bits."""
    return (np.uint64(rec_index + 1) << np.uint64(48)) | np.asarray(launch_id, np.uint64)


@dataclass
class ApiSummary:
    pid: int
    calls: int
    threads: int
    flows: int
    shown: bool
    why_not: str = ""


def write_api_calls(
    w: TraceWriter, rec: Recording, rec_index: int, related: bool, flowed_launches: np.ndarray
) -> ApiSummary:
    """`flowed_launches`: indexes into rec.launches whose kernel slice was written
    (each gets one flow from the call that made it)."""
    calls = rec.api_calls
    pid = rec.run.pid if rec.run else 0
    threads = np.unique(calls["thread_id"]) if len(calls) else np.zeros(0, np.uint32)
    if not related:
        return ApiSummary(
            pid,
            len(calls),
            len(threads),
            0,
            False,
            "no measured clock relation (--clock device, or no probe): host calls cannot be placed",
        )
    argv = " ".join(rec.run.argv[:3]) if rec.run and rec.run.argv else ""
    group = w.track(
        f"CUDA API, pid {pid}",  # fits the UI's name column; what and which clock: the description
        description=(
            f"{argv}: CUDA runtime and driver API calls recorded by gpuobs --api-trace on "
            "CLOCK_MONOTONIC. They relate to the device-clock GPU tracks only through the "
            "measured clock snapshots (see each GPU group's description). Nested calls "
            "(a runtime call and the driver calls it makes) sit on lanes merged into their "
            "thread's track. Flows lead from each launching call to its kernel slices."
        ),
    )
    # One lane per (thread, nesting depth), more only where calls of one depth
    # share a time (a zero-length call where another begins or ends).
    start = calls["enter_ns"].astype(np.uint64)
    end = np.maximum(calls["exit_ns"], calls["enter_ns"]).astype(np.uint64)
    keys, depth_group = np.unique(
        np.stack([calls["thread_id"].astype(np.int64), calls["depth"].astype(np.int64)]), axis=1, return_inverse=True
    )
    rank_of_thread = {tid: rank for rank, tid in enumerate(threads.tolist())}
    thread_of = keys[0].tolist()
    tracks = lane_tracks(
        depth_group.reshape(-1),
        start,
        end,
        lambda g: w.track(
            f"thread {thread_of[g]}",
            parent=group,
            rank=rank_of_thread[thread_of[g]],
            merge_key=f"api-{group}-{thread_of[g]}",
        ),
    )
    names = sorted(rec.api_names.items())
    iid = {api_id: i + 1 for i, (api_id, _) in enumerate(names)}
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for api_id, name in names:
        first.interned_data.event_names.add(iid=iid[api_id], name=name or f"api#{api_id:#x}")
    for arg, arg_iid in ARG_NAMES.items():
        first.interned_data.debug_annotation_names.add(iid=arg_iid, name=arg)
    w.packet(first)

    # Flows: launches (with a kernel slice) grouped by the call that made them.
    launches = rec.launches[flowed_launches]
    by_call = {}
    for call_id, lid in zip(launches["api_call_id"].tolist(), launches["launch_id"].tolist()):
        if call_id:
            by_call.setdefault(call_id, []).append(lid)
    n = len(calls)
    k = max((len(v) for v in by_call.values()), default=0)
    flows = np.zeros((n, max(k, 1)), np.uint64)
    counts = np.zeros(n, np.int64)
    index_of_call = {c: i for i, c in enumerate(calls["call_id"].tolist())}
    written = 0
    for call_id, lids in by_call.items():
        i = index_of_call.get(call_id)
        if i is None:
            continue
        flows[i, : len(lids)] = flow_id(rec_index, lids)
        counts[i] = len(lids)
        written += len(lids)

    slices = Slices(tracks.of_slice, start, end, np.array([iid.get(int(a), 0) for a in calls["api_id"]], np.uint64))
    result = calls["result"].astype(np.int64)
    slices.int_arg(ARG_NAMES["result"], result, present=result != 0)
    slices.choice_arg(ARG_NAMES["domain"], [b"driver", b"runtime"], (calls["api_id"] >> 16) == RUNTIME_DOMAIN)
    slices.flows_out(flows, counts)
    write_slices(w, slices, seq, clock_id=MONOTONIC)
    return ApiSummary(pid, n, len(threads), written, True)
