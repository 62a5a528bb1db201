"""A small, independent reader of the traces gpuobs writes, for tests: resolves
sequences, defaults, interning and incremental clocks the way trace processor
does, and rebuilds slices from begin/end pairs per track."""

from collections import defaultdict
from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

INCREMENTAL_CLOCK = 64


@dataclass
class Decoded:
    tracks: dict = field(default_factory=dict)  # uuid -> TrackDescriptor
    slices: list = field(default_factory=list)  # (track, name, start, end, args)
    counters: list = field(default_factory=list)  # (track, ts, value)
    snapshots: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    packets: int = 0
    flows_out: dict = field(default_factory=dict)  # flow id -> index into slices (where a flow starts)
    flows_in: dict = field(default_factory=dict)  # flow id -> index into slices (where it terminates)

    def tracks_named(self, name):
        return [u for u, t in self.tracks.items() if t.name == name]


def decode(path) -> Decoded:
    trace = pb.Trace()
    with open(path, "rb") as fh:
        trace.ParseFromString(fh.read())
    d = Decoded(packets=len(trace.packet))
    state = {}  # seq -> dict
    open_slices = defaultdict(list)
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d.tracks[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("clock_snapshot") and not any(c.clock_id == INCREMENTAL_CLOCK for c in p.clock_snapshot.clocks):
            d.snapshots.append(p.clock_snapshot)
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            state[seq] = {"names": {}, "args": {}, "defaults": None, "inc": None}
        s = state.get(seq)
        if p.HasField("interned_data"):
            if s is None:
                d.problems.append(f"interned data on seq {seq} before its CLEARED packet")
                continue
            for e in p.interned_data.event_names:
                s["names"][e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                s["args"][e.iid] = e.name
        if p.HasField("trace_packet_defaults") and s is not None:
            s["defaults"] = p.trace_packet_defaults
        if p.HasField("clock_snapshot") and s is not None:
            for c in p.clock_snapshot.clocks:
                if c.clock_id == INCREMENTAL_CLOCK:
                    s["inc"] = c.timestamp
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        defaults = s["defaults"] if s else None
        clock_id = (
            p.timestamp_clock_id
            if p.HasField("timestamp_clock_id")
            else (defaults.timestamp_clock_id if defaults and defaults.HasField("timestamp_clock_id") else None)
        )
        if clock_id == INCREMENTAL_CLOCK:
            if s is None or s["inc"] is None:
                d.problems.append("incremental timestamp without a snapshot")
                continue
            s["inc"] += p.timestamp
            ts = s["inc"]
        else:
            ts = p.timestamp
        if te.HasField("name_iid") and not (p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE):
            d.problems.append("packet uses interned data without SEQ_NEEDS_INCREMENTAL_STATE")
        track = (
            te.track_uuid
            if te.HasField("track_uuid")
            else (defaults.track_event_defaults.track_uuid if defaults else 0)
        )
        if track not in d.tracks:
            d.problems.append(f"event on undeclared track {track}")
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            name = s["names"].get(te.name_iid) if te.HasField("name_iid") else te.name
            if name is None:
                d.problems.append(f"name iid {te.name_iid} not interned on seq {seq}")
            args = {}
            for a in te.debug_annotations:
                key = s["args"].get(a.name_iid, a.name) if a.HasField("name_iid") else a.name
                args[key] = (
                    a.int_value
                    if a.HasField("int_value")
                    else (
                        a.string_value
                        if a.HasField("string_value")
                        else (a.bool_value if a.HasField("bool_value") else None)
                    )
                )
            open_slices[track].append((name, ts, args, list(te.flow_ids), list(te.terminating_flow_ids)))
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            if not open_slices[track]:
                d.problems.append(f"end without begin on track {track}")
                continue
            name, start, args, outs, ins = open_slices[track].pop()
            if open_slices[track]:
                d.problems.append(f"nested slices on track {track}: lanes must not overlap")
            d.slices.append((track, name, start, ts, args))
            for f in outs:
                if f in d.flows_out:
                    d.problems.append(f"flow {f} starts twice")
                d.flows_out[f] = len(d.slices) - 1
            for f in ins:
                if f in d.flows_in:
                    d.problems.append(f"flow {f} terminates twice")
                d.flows_in[f] = len(d.slices) - 1
        elif te.type == pb.TrackEvent.TYPE_COUNTER:
            d.counters.append((track, ts, te.double_counter_value))
    for track, stack in open_slices.items():
        if stack:
            d.problems.append(f"{len(stack)} unclosed slices on track {track}")
    return d
