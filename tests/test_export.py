"""The exported trace, decoded with the perfetto package's protos."""

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.kernel_names import slice_names
from gpuobs.perfetto_export.export import ExportError, ExportOptions, export
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

from .encoder_helpers import assert_both_encoders_identical
from .trace_decode import decode


@pytest.fixture
def exported(tmp_path, block_recording):
    out = tmp_path / "t.pftrace"
    rec = gpuobs.load(block_recording)
    summary = export([rec], out)
    return rec, decode(out), summary


def _sm_of(d, track):
    return int(d.tracks[track].name.split()[1])


def test_one_track_per_sm_in_sm_order(exported):
    rec, d, summary = exported
    assert d.problems == []
    sms = sorted(set(rec.events["sm_id"].tolist()))
    names = {t.name for t in d.tracks.values() if t.name.startswith("SM ")}
    assert names == {f"SM {s}" for s in sms}
    group = d.tracks[d.tracks_named("SMs")[0]]
    assert group.child_ordering == group.EXPLICIT
    for t in d.tracks.values():
        if t.name.startswith("SM "):
            assert t.sibling_order_rank == int(t.name.split()[1])  # "SM 2" before "SM 10"
            assert t.sibling_merge_key == f"sm-{t.name.split()[1]}" and t.parent_uuid == group.uuid


def test_every_block_slice_is_its_record(exported):
    rec, d, _ = exported
    blocks = [s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    assert len(blocks) == len(rec.events)
    got = sorted((_sm_of(d, t), start, end, args["block"], args["launch"]) for t, _n, start, end, args in blocks)
    ev = rec.events
    of = analysis.launch_index_of_events(rec)
    want = sorted(
        zip(
            ev["sm_id"].tolist(),
            ev["time_start"].tolist(),
            ev["time_end"].tolist(),
            ev["block_x"].tolist(),
            rec.launches["launch_id"][of].tolist(),
        )
    )
    assert got == want


def test_lanes_never_overlap(exported):
    rec, d, _ = exported
    per_track = {}
    for t, _n, start, end, _a in d.slices:
        per_track.setdefault(t, []).append((start, end))
    for spans in per_track.values():
        spans.sort()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))


def test_kernel_slices_span_their_blocks_with_args(exported):
    rec, d, summary = exported
    kernel_tracks = set(d.tracks_named("Kernels"))
    kernels = [s for s in d.slices if s[0] in kernel_tracks]
    assert len(kernels) == len(rec.launches) == summary.kernel_slices
    blocks = [s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    for _t, name, start, end, args in kernels:
        mine = [b for b in blocks if b[4]["launch"] == args["launch"]]
        assert start == min(b[2] for b in mine) and end == max(b[3] for b in mine)
        assert all(b[1] == name for b in mine)  # interned names resolve to the kernel's name
        assert args["blocks_recorded"] == 1024 and args["blocks_dropped"] == 0 and args["counted"] == 1024
        assert args["grid"] == "1024x1x1" and args["block_dim"] == "128x1x1"
    full = {synthetic.FUNCTION_NAMES[0][1], synthetic.FUNCTION_NAMES[1][0], synthetic.FUNCTION_NAMES[2][1]}
    assert {k[4]["kernel"] for k in kernels} == full  # the full signature in the args
    assert {k[1] for k in kernels} == set(slice_names(sorted(full), 90))  # the short one names the slice


def test_gpu_group_names_device_and_clock(exported):
    _rec, d, _ = exported
    gpu = [t for t in d.tracks.values() if t.name.startswith("GPU ")]
    assert len(gpu) == 1 and gpu[0].name == "GPU 0 H200 (pid 4242)"  # fits the UI's name column
    assert "NVIDIA H200" in gpu[0].description and "Device clock" in gpu[0].description
    assert "+/-" in gpu[0].description and "measured" in gpu[0].description.lower() or "probe" in gpu[0].description


def test_snapshots_only_when_measured(tmp_path, block_recording):
    rec = gpuobs.load(block_recording)
    measured = decode(export_to(tmp_path / "a.pftrace", [rec]))
    assert len(measured.snapshots) == len(rec.clock_samples) == 2
    ids = {c.clock_id for c in measured.snapshots[0].clocks}
    assert {1, 3, 6} <= ids and any(i >= 128 for i in ids)
    device = decode(export_to(tmp_path / "b.pftrace", [rec], ExportOptions(clock="device")))
    assert device.snapshots == [] and device.problems == []
    # a recording without clock samples never gets an invented snapshot
    unmeasured = synthetic.write_block_trace_recording(tmp_path / "u.gpuobs", clock_offset_ns=None)
    none = decode(export_to(tmp_path / "c.pftrace", [gpuobs.load(unmeasured)]))
    assert none.snapshots == [] and none.problems == []
    assert "No host-clock relation" in [t for t in none.tracks.values() if t.name.startswith("GPU")][0].description
    # device mode keeps raw device timestamps
    starts = sorted(s[2] for s in device.slices if device.tracks[s[0]].name.startswith("SM "))
    assert starts == sorted(rec.events["time_start"].tolist())


def export_to(path, recs, opts=None):
    export(recs, path, opts)
    return path


def test_filters(tmp_path, block_recording):
    rec = gpuobs.load(block_recording)
    d = decode(export_to(tmp_path / "k.pftrace", [rec], ExportOptions(kernels="silu")))
    assert {s[4].get("kernel") for s in d.slices if "kernel" in s[4]} == {synthetic.FUNCTION_NAMES[0][1]}
    assert {s[1] for s in d.slices} == {"silu_and_mul<BFloat16>"}
    d = decode(export_to(tmp_path / "l.pftrace", [rec], ExportOptions(launches="2:4")))
    assert sorted({s[4]["launch"] for s in d.slices}) == [2, 3]
    t0 = int(rec.events["time_start"].min())
    d = decode(export_to(tmp_path / "w.pftrace", [rec], ExportOptions(time_window="0:10us")))
    starts = [s[2] for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    assert starts and all(t0 <= s < t0 + 10_000 for s in starts)
    for bad, msg in (
        ({"kernels": "("}, "not a valid regular expression"),
        ({"launches": "7"}, "START:END"),
        ({"time_window": "1 parsec:"}, "not a number"),
        ({"clock": "host"}, "auto or device"),
    ):
        with pytest.raises(ExportError, match=msg):
            export([rec], tmp_path / "x.pftrace", ExportOptions(**bad))


def test_drops_are_visible(tmp_path):
    path = synthetic.write_block_trace_recording(tmp_path / "d.gpuobs", dropped=100)
    d = decode(export_to(tmp_path / "d.pftrace", [gpuobs.load(path)]))
    drops = [c for c in d.counters if d.tracks[c[0]].name == "Dropped records"]
    assert max(c[2] for c in drops) == 100
    gpu = [t for t in d.tracks.values() if t.name.startswith("GPU ")][0]
    assert "DROPPED" in gpu.description
    kernels = [s for s in d.slices if d.tracks[s[0]].name == "Kernels"]
    assert sum(k[4]["blocks_dropped"] for k in kernels) == 100


def test_launches_outside_recording_windows_are_said_not_drawn(tmp_path):
    path = synthetic.write_block_trace_recording(tmp_path / "w.gpuobs", unrecorded_launches=35)
    rec = gpuobs.load(path)
    out = tmp_path / "w.pftrace"
    summary = export([rec], out)
    assert summary.gpus[0].unrecorded_launches == 35
    d = decode(out)
    gpu = [t for t in d.tracks.values() if t.name.startswith("GPU ")][0]
    assert "35 kernel launches and graph replays ran outside them" in gpu.description
    assert len([s for s in d.slices if d.tracks[s[0]].name == "Kernels"]) == len(rec.launches)
    plain = synthetic.write_block_trace_recording(tmp_path / "p.gpuobs")
    decoded = decode(export_to(tmp_path / "p.pftrace", [gpuobs.load(plain)]))
    assert "windows" not in [t for t in decoded.tracks.values() if t.name.startswith("GPU ")][0].description


def test_memory_counters_add_up_to_exact_counts(tmp_path):
    ev, launches = synthetic.block_trace_events(2, 300, sm_count=8)
    ev["kind"] = schema.EventKind.MEMORY
    ev["time_end"] = 0
    counts = np.zeros(2, schema.dtype("gpuobs_launch_count"))
    counts["grid_id"], counts["count"], counts["launches_sharing"] = launches["grid_id"], (307_200, 1_000_000), 1
    path = tmp_path / "m.gpuobs"
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.MEM_SAMPLED)
        w.launches(launches)
        w.flush(attempted=600, recorded=600, dropped=0, launch_counts=counts)
        w.events(ev)
    d = decode(export_to(tmp_path / "m.pftrace", [gpuobs.load(path)]))
    total = sum(c[2] for c in d.counters if d.tracks[c[0]].name == "Global accesses per bin")
    assert total == pytest.approx(1_307_200)


def test_several_recordings_into_one_trace(tmp_path):
    a = synthetic.write_block_trace_recording(tmp_path / "a.gpuobs", n_launches=2, blocks_per_launch=64)
    b = synthetic.write_block_trace_recording(
        tmp_path / "b.gpuobs", n_launches=3, blocks_per_launch=64, device_name="NVIDIA H200 (second)"
    )
    d = decode(export_to(tmp_path / "ab.pftrace", [gpuobs.load(a), gpuobs.load(b)]))
    assert d.problems == []
    assert len([t for t in d.tracks.values() if t.name.startswith("GPU ")]) == 2
    assert len(d.slices) == 5 * 64 + 5


def test_native_and_numpy_encoders_write_identical_bytes(tmp_path, monkeypatch):
    ev, launches = synthetic.block_trace_events(5, 400, sm_count=24)
    ev["block_y"][::7] = 3  # exercise the optional annotations
    ev["block_z"][::11] = 2
    path = tmp_path / "r.gpuobs"
    with RecordingWriter(path) as w:
        w.launches(launches[:4])  # the last launch is unknown: no launch annotation on its blocks
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0)
        w.events(ev)
    assert_both_encoders_identical(gpuobs.load(path), tmp_path, monkeypatch)


def test_native_and_numpy_lanes_agree():
    from gpuobs.perfetto_export import lanes, native_encoder

    if native_encoder.encoder() is None:
        pytest.skip("no C compiler")
    ev, _ = synthetic.block_trace_events(20, 700, sm_count=16, seed=3)
    g, s, e = ev["sm_id"].astype(np.int64), ev["time_start"], ev["time_end"]
    native = lanes.assign_lanes(g, s, e)
    original = native_encoder.encoder
    try:
        native_encoder.encoder = lambda: None
        numpy_lanes = lanes.assign_lanes(g, s, e)
    finally:
        native_encoder.encoder = original
    np.testing.assert_array_equal(native, numpy_lanes)


def _write_one_window(path, ev, launches):
    """A recording of one device and one flush window holding these launches and events."""
    with RecordingWriter(path) as w:
        w.device(name="NVIDIA H200", sm_count=8)
        for slot, (mangled, demangled) in enumerate(synthetic.FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.launches(launches)
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0)
        w.events(ev)


def test_kernel_slices_say_how_their_launch_was_listed(tmp_path):
    """A grid launched from the device and a graph node listed from its exec's node
    table carry an argument saying so; plain launches carry neither."""
    ev, launches = synthetic.block_trace_events(3, 50, sm_count=8)
    launches["flags"][1] = schema.LaunchFlag.FROM_DEVICE
    launches["flags"][2] = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE
    launches["graph_launch_id"][2] = 9
    path = tmp_path / "listed.gpuobs"
    _write_one_window(path, ev, launches)
    d = decode(export_to(tmp_path / "listed.pftrace", [gpuobs.load(path)]))
    kernels = sorted((args["launch"], args) for _t, _n, _s, _e, args in d.slices if "grid" in args)
    assert [("launched_from_device" in a, "listed_from_node_table" in a) for _l, a in kernels] == [
        (False, False),
        (True, False),
        (False, True),
    ]
    assert kernels[2][1]["graph_replay"] == 9


def test_graph_replays_are_grouped_and_nodes_numbered(tmp_path):
    """Two replays of a three-kernel graph: a "Graph replays" track with one slice per
    replay over its kernels, and each kernel slice's position in its replay."""
    ev, launches = synthetic.block_trace_events(6, 40, sm_count=8, gap_ns=1_000)
    launches["flags"] = schema.LaunchFlag.GRAPH_NODE
    launches["graph_launch_id"] = [5, 5, 5, 6, 6, 6]
    path = tmp_path / "replays.gpuobs"
    _write_one_window(path, ev, launches)
    rec = gpuobs.load(path)
    d = decode(export_to(tmp_path / "replays.pftrace", [rec]))
    assert d.problems == []
    replays = sorted((s, e, a) for t, n, s, e, a in d.slices if d.tracks[t].name == "Graph replays")
    table = analysis.launch_table(rec)
    want = [(int(table.first_start[k : k + 3].min()), int(table.last_end[k : k + 3].max())) for k in (0, 3)]
    assert [(s, e) for s, e, _a in replays] == want
    assert [(a["graph_replay"], a["kernels"]) for _s, _e, a in replays] == [(5, 3), (6, 3)]
    kernels = sorted((a["launch"], a["graph_node"]) for _t, _n, _s, _e, a in d.slices if "grid" in a)
    assert [node for _l, node in kernels] == [0, 1, 2, 0, 1, 2]
