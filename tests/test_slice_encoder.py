"""The one slice encoder: its C and numpy paths write the same bytes, and every
slice decodes back as written, however slices touch, nest or have no length."""

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import gpuobs
from gpuobs.perfetto_export import native_encoder
from gpuobs.perfetto_export.export import ExportOptions, export
from gpuobs.perfetto_export.lanes import assign_lanes, lane_tracks
from gpuobs.perfetto_export.slice_encoder import Slices, packet_order, write_slices
from gpuobs.perfetto_export.trace_writer import SEQ_CLEARED, TraceWriter
from gpuobs.recording_file import synthetic

from .trace_decode import decode

HAVE_C = native_encoder.encoder() is not None
PATHS = ["c", "numpy"] if HAVE_C else ["numpy"]
BASE = 1_732_000_000_000_000_000  # REALTIME-sized timestamps: varints of 9 bytes


@contextmanager
def path(name):
    """Runs the encoder and lane assigner on one path: "c" or "numpy"."""
    original = native_encoder.encoder
    if name == "numpy":
        native_encoder.encoder = lambda: None
    try:
        yield
    finally:
        native_encoder.encoder = original


# Slices as (group, start, length), on a small time range so that equal starts,
# equal ends, identical, touching, nested and zero-length slices are common.
slice_lists = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 12), st.sampled_from([0, 0, 1, 2, 3, 5, 8])), min_size=1, max_size=40
)


def write_trace(out: Path, slices_in) -> tuple[bytes, np.ndarray]:
    """slices_in as a trace: a lane track per (group, lane), named slices with
    every kind of argument and flows. Returns the bytes and each slice's track."""
    group = np.array([g for g, _, _ in slices_in], np.int64)
    start = np.array([BASE + 100 * s for _, s, _ in slices_in], np.uint64)
    end = start + np.array([100 * d for _, _, d in slices_in], np.uint64)
    w = TraceWriter()
    tracks = lane_tracks(group, start, end, lambda g: w.track(f"group {g}", merge_key=f"group-{g}"))
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    n = len(slices_in)
    for i in range(n):
        first.interned_data.event_names.add(iid=i + 1, name=f"slice {i}")
    for iid, name in enumerate(["index", "negative", "text", "odd", "mark", "narrow", "small"], start=1):
        first.interned_data.debug_annotation_names.add(iid=iid, name=name)
    w.packet(first)
    i = np.arange(n)
    s = Slices(tracks.of_slice, start, end, i + 1)
    s.int_arg(1, i).int_arg(2, -i - 2**40).string_arg(3, [b"x" * (j % 4) + b"!" for j in range(n)])
    s.choice_arg(4, [b"even", b"odd"], i % 2, present=i % 3 != 0).bool_arg(5, present=i % 2 == 0)
    s.flows_out(np.stack([i + 1, i + 1001], axis=1), i % 3)
    records = np.zeros(n, [("pad", np.uint8), ("narrow", np.uint16), ("small", np.int8)])  # strided columns
    records["narrow"], records["small"] = 65535 - i, -i
    s.int_arg(6, records["narrow"]).int_arg(7, records["small"], present=i > 0, at_least=-20)
    write_slices(w, s, seq, clock_id=pb.BUILTIN_CLOCK_REALTIME)
    w.save(out)
    return out.read_bytes(), tracks.of_slice


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slice_lists)
@example([(0, 10, 1), (0, 10, 0)])  # the issue: a 0-ns event on the same thread as a longer one...
@example([(0, 10, 2), (0, 11, 0)])  # ...inside it
@example([(0, 3, 0), (0, 3, 0), (0, 3, 2), (0, 1, 2), (0, 5, 0)])  # identical, touching at both ends
def test_both_paths_write_the_same_valid_slices(tmp_path, slices_in):
    written = {}
    for name in PATHS:
        with path(name):
            written[name] = write_trace(tmp_path / f"{name}.pftrace", slices_in)
    data, tracks = written["numpy"]
    if HAVE_C:
        np.testing.assert_array_equal(written["c"][1], tracks)  # the same lanes
        assert written["c"][0] == data
    d = decode(tmp_path / "numpy.pftrace")
    assert d.problems == []
    got = Counter((d.tracks[t].name, name, s, e) for t, name, s, e, _ in d.slices)
    want = Counter(
        (f"group {g}", f"slice {i}", BASE + 100 * s, BASE + 100 * (s + dur)) for i, (g, s, dur) in enumerate(slices_in)
    )
    assert got == want
    by_name = {name: args for _, name, _, _, args in d.slices}
    for i in range(len(slices_in)):
        args = by_name[f"slice {i}"]
        expected = {"index": i, "negative": -i - 2**40, "text": "x" * (i % 4) + "!", "narrow": 65535 - i}
        if 0 < i <= 20:
            expected["small"] = -i
        if i % 3:
            expected["odd"] = "odd" if i % 2 else "even"
        if i % 2 == 0:
            expected["mark"] = True
        assert args == expected
    assert sorted(d.flows_out) == sorted(f for i in range(len(slices_in)) for f in (i + 1, i + 1001)[: i % 3])


def test_a_zero_length_slice_nests_beside_every_slice_that_contains_it():
    # [10, 20] with zero-length slices at its start, inside, at its end; one touching slice after it
    start = np.array([10, 10, 15, 20, 20, 20], np.uint64)
    end = np.array([20, 10, 15, 20, 30, 20], np.uint64)
    for name in PATHS:
        with path(name):
            lane = assign_lanes(np.zeros(6, np.int64), start, end)
        assert lane[4] == lane[0]  # touching slices share a lane
        assert lane[1] != lane[0] and lane[2] != lane[0] and lane[3] != lane[0]  # points of [10, 20]
        assert lane[3] != lane[4] and lane[3] != lane[5]  # the start of [20, 30], and another point at 20


def test_blocks_with_zero_length_and_equal_times_export_identically_on_both_paths(tmp_path):
    def odd_timings(ev):
        ev["time_end"][::5] = ev["time_start"][::5]  # zero-length blocks
        ev["time_start"][1::7] = ev["time_start"][0::7][: len(ev[1::7])]  # equal starts (the same SM)
        ev["time_end"][2::9] = ev["time_start"][2::9] - 1  # ends before starts: drawn as zero-length

    rec = gpuobs.load(
        synthetic.write_block_trace_recording(
            tmp_path / "r.gpuobs", n_launches=2, blocks_per_launch=96, sm_count=4, seed=5, edit_events=odd_timings
        )
    )
    ev = rec.events
    for opts in (ExportOptions(), ExportOptions(clock="device")):
        for name in PATHS:
            with path(name):
                export([rec], tmp_path / f"{name}.pftrace", opts)
        if HAVE_C:
            assert (tmp_path / "c.pftrace").read_bytes() == (tmp_path / "numpy.pftrace").read_bytes()
        d = decode(tmp_path / "numpy.pftrace")
        assert d.problems == []
        blocks = sorted((s, e) for track, _, s, e, _ in d.slices if d.tracks[track].name.startswith("SM "))
        assert blocks == sorted(zip(ev["time_start"].tolist(), np.maximum(ev["time_end"], ev["time_start"]).tolist()))


def test_zero_length_host_event_inside_another_on_both_paths(tmp_path, block_recording):
    """Issue 19: a 0-ns profiler mark inside a 100-ns op on the same thread lost its
    BEGIN (C path) or cut the op short at the mark (numpy path)."""
    base = 1_732_000_000_000_000_000
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 2, "ts": 1.0, "dur": 0.1},
        {"ph": "X", "cat": "user_annotation", "name": "mark", "pid": 1, "tid": 2, "ts": 1.05, "dur": 0},
    ]
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": events}))
    exporter = str(Path(gpuobs.__file__).parents[1])
    for pure in ("0", "1"):
        env = dict(
            os.environ,
            GPUOBS_PURE_PYTHON=pure,
            PYTHONPATH=os.pathsep.join([exporter, os.environ.get("PYTHONPATH", "")]),
        )
        out = tmp_path / f"t{pure}.pftrace"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuobs",
                "export",
                str(block_recording),
                "--host",
                str(prof),
                "--clock",
                "device",
                "-o",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        d = decode(out)
        assert d.problems == []
        host = {name: (s - base, e - base) for _, name, s, e, _ in d.slices if name in ("outer", "mark")}
        assert host == {"outer": (1000, 1100), "mark": (1050, 1050)}


def _shapes(rng, n):
    """Slices of the shapes the C sort and merge meet: times random, in order, in runs in
    order (tables one after another), reversed, or few (ties everywhere); lengths of
    each kind (zero among them) or all one length (ends in the starts' order); groups
    at random, one, or in blocks (the order a table of one thread per block gives)."""
    starts = {
        "random": rng.integers(0, 10**6, n),
        "ties": rng.integers(0, 4, n),
        "sorted": np.sort(rng.integers(0, 10**6, n)),
        "runs": np.concatenate([np.sort(rng.integers(0, 10**6, k)) for k in (n // 3, n // 3, n - 2 * (n // 3))]),
        "reversed": np.sort(rng.integers(0, 10**6, n))[::-1].copy(),
    }
    groups = {"random": rng.integers(0, 5, n), "one": np.zeros(n, np.int64), "blocks": np.sort(rng.integers(0, 5, n))}
    for (name, start), (kind, group) in itertools.product(starts.items(), groups.items()):
        for length in (rng.choice([0, 0, 1, 3, 50, 10**4], n), np.full(n, 7)):
            yield f"{name}/{kind}", group, (start + BASE).astype(np.uint64), (start + BASE + length).astype(np.uint64)


@pytest.mark.skipif(not HAVE_C, reason="no C compiler")
@pytest.mark.parametrize("n", [1, 2, 31, 33, 100, 5000])
def test_c_sort_is_numpys_stable_argsort(n):
    """gpuobs_sort_keyed against np.argsort(kind="stable"): the same order, ties included."""
    rng = np.random.default_rng(n)
    lib, ffi = native_encoder.encoder(), native_encoder._FFI
    for keys in (
        rng.integers(0, 3, n),
        rng.integers(0, 2**63, n),
        np.sort(rng.integers(0, 50, n)),
        np.sort(rng.integers(0, 50, n))[::-1],
        np.r_[np.sort(rng.integers(0, 9, n // 2)), np.sort(rng.integers(0, 9, n - n // 2))],
    ):
        key = np.ascontiguousarray(keys, np.uint64)
        item = np.arange(n, dtype=np.int64)
        want = np.argsort(key, kind="stable")
        assert lib.gpuobs_sort_keyed(n, ffi.cast("uint64_t*", key.ctypes.data), ffi.cast("int64_t*", item.ctypes.data))
        assert np.array_equal(item, want) and np.array_equal(key, np.sort(keys.astype(np.uint64)))


@pytest.mark.skipif(not HAVE_C, reason="no C compiler")
@pytest.mark.parametrize("n", [1, 40, 3000])
def test_c_lanes_and_packet_order_are_the_numpy_paths(n):
    """The one-pass C lanes (gpuobs_lanes) and packet order (gpuobs_packet_order) give
    what the numpy paths give, on random, sorted, run-wise sorted, reversed and
    all-tied slices with zero lengths and equal times."""
    rng = np.random.default_rng(7 + n)
    for name, group, start, end in _shapes(rng, n):
        with path("numpy"):
            want_lanes = assign_lanes(group, start, end)
            ids = iter(range(1, 10**6))
            want_tracks = lane_tracks(group, start, end, lambda g, ids=ids: next(ids))
            want_order = [packet_order(start, end, g) for g in (None, group)]
        got_lanes = assign_lanes(group, start, end)
        ids = iter(range(1, 10**6))
        got_tracks = lane_tracks(group, start, end, lambda g, ids=ids: next(ids))
        got_order = [packet_order(start, end, g) for g in (None, group)]
        assert np.array_equal(got_lanes, want_lanes), name
        assert np.array_equal(got_tracks.of_slice, want_tracks.of_slice), name
        assert got_tracks.first == want_tracks.first and np.array_equal(got_tracks.lanes, want_tracks.lanes), name
        for got, want in zip(got_order, want_order):
            for field in ("slice", "is_begin", "time", "group"):
                a, b = getattr(got, field), getattr(want, field)
                assert a.dtype == b.dtype and np.array_equal(a, b), (name, field)
        # int64 times as they come from host traces: the same lanes as their uint64
        assert np.array_equal(assign_lanes(group, start.view(np.int64), end.view(np.int64)), want_lanes), name


@pytest.mark.parametrize("name", PATHS)
def test_a_choice_read_in_place_writes_what_per_slice_strings_write(tmp_path, name):
    """choice_arg reads its choice per slice in place (a strided int32 field, a bool
    mask) and writes the bytes string_arg writes with each slice's own string; a
    choice out of range is taken as numpy indexing takes it (-1: the last)."""
    n = 300
    rows = np.zeros(n, [("pad", np.uint8), ("which", np.int32)])
    rows["which"] = np.arange(n) % 3
    choices = [b"kernel", b"", b"cuda_runtime"]
    odd = np.arange(n) % 2 == 1
    negative = np.where(odd, -1, 0)

    def trace(use_choice: bool) -> bytes:
        w = TraceWriter()
        seq = w.new_sequence()
        start = np.arange(n, dtype=np.uint64) * 10 + BASE
        s = Slices(np.full(n, w.track("t"), np.uint64), start, start + 5, np.ones(n, np.uint64))
        if use_choice:
            s.choice_arg(1, choices, rows["which"]).choice_arg(2, [b"even", b"odd"], odd)
            s.choice_arg(3, choices, negative, present=odd)
        else:
            s.string_arg(1, [choices[v] for v in rows["which"]]).string_arg(2, [[b"even", b"odd"][int(v)] for v in odd])
            s.string_arg(3, [choices[v] for v in negative], present=odd)
        write_slices(w, s, seq)
        out = tmp_path / f"{name}-{use_choice}.pftrace"
        w.save(out)
        return out.read_bytes()

    with path(name):
        assert trace(True) == trace(False)


@pytest.mark.skipif(not HAVE_C, reason="no C compiler")
@pytest.mark.parametrize("batch", [1, 5, 1 << 17])
def test_write_slices_in_batches_writes_what_the_whole_packet_order_writes(tmp_path, monkeypatch, batch):
    """write_slices walks the packet order and encodes it a batch at a time in one C
    call each (merged runs or sorted keys): the bytes of write_packets over the whole
    packet_order, on both paths, whatever the batch; every argument kind, flows, a clock."""
    from gpuobs.perfetto_export import slice_encoder

    rng = np.random.default_rng(batch)
    walked = []
    original = native_encoder.walked_slices
    monkeypatch.setattr(native_encoder, "walked_slices", lambda *a: walked.append(1) or original(*a))

    def trace(how: str, group, start, end) -> bytes:
        w = TraceWriter()
        seq = w.new_sequence()
        n = len(start)
        i = np.arange(n)
        track = np.where(group % 3 == 0, 0, group.astype(np.uint64) + 2**40)  # 0: no track_uuid
        s = Slices(track, start, end, i.astype(np.uint64) + 1)
        s.choice_arg(1, [b"a", b"bc"], group % 2).int_arg(2, -i, present=i % 4 != 1, at_least=-n // 2)
        s.string_arg(3, [b"\x00" * (j % 3) + "é".encode() for j in range(n)]).bool_arg(4, present=i % 2 == 0)
        s.flows_in(np.stack([i + 1, i.astype(np.uint64) + np.uint64(2**63)], axis=1), i % 3)
        clock = pb.BUILTIN_CLOCK_BOOTTIME if batch == 5 else None
        if how == "whole":
            slice_encoder.write_packets(w, packet_order(start, end), s, seq, clock_id=clock)
        else:
            write_slices(w, s, seq, clock_id=clock)
        out = tmp_path / f"{how}.pftrace"
        w.save(out)
        return out.read_bytes()

    for name, group, start, end in _shapes(rng, 500):
        with path("numpy"):
            want = trace("batches", group, start, end)
        monkeypatch.setattr(slice_encoder, "PACKETS_PER_BATCH", batch)
        del walked[:]
        assert trace("batches", group, start, end) == want == trace("whole", group, start, end), name
        assert walked == [1]  # the C walk and encoding, not packet_order's columns


def _lane_tracks_by_table(group, start, end, new_track):
    """lane_tracks as it was: a (groups x most lanes) table of the tracks, read at (group, lane)."""
    lane = assign_lanes(group, start, end)
    lanes = np.zeros(int(group.max()) + 1, np.int64)
    np.maximum.at(lanes, group, lane + 1)
    table = np.zeros((len(lanes), int(lanes.max())), np.uint64)
    for g in np.flatnonzero(lanes).tolist():
        table[g, : lanes[g]] = [new_track(g) for _ in range(int(lanes[g]))]
    first = {g: int(table[g, 0]) for g in np.flatnonzero(lanes).tolist()}
    return table[group, lane], lanes, first


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("how", PATHS)
def test_lane_tracks_are_the_tables(seed, how):
    """lane_tracks without its table (a slice's track by its group's offset and its lane,
    in C or by numpy's gathers), through new_track and new_tracks, against the table it
    replaced."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 500))
    group = rng.integers(0, int(rng.integers(1, 40)), n)
    start = rng.integers(0, 1000, n).astype(np.uint64)
    end = start + rng.integers(0, 300, n).astype(np.uint64)
    made = iter(range(1000, 10**6, 3))
    want, want_lanes, want_first = _lane_tracks_by_table(group, start, end, lambda g: next(made))
    made = iter(range(1000, 10**6, 3))
    with path(how):
        got = lane_tracks(group, start, end, lambda g: next(made))
        uuids = np.arange(1000, 10**6, 3, dtype=np.uint64)
        batch = lane_tracks(group, start, end, new_tracks=lambda lanes: uuids[: int(lanes.sum())])
    for t in (got, batch):
        assert t.of_slice.tolist() == want.tolist() and t.lanes.tolist() == want_lanes.tolist()
        assert t.first == want_first


@pytest.mark.skipif(not HAVE_C, reason="no C compiler")
def test_slice_tracks_in_c_decline_what_is_out_of_range():
    offset, made = np.array([0, 2, 2]), np.arange(10, 15, dtype=np.uint64)
    group, lane = np.array([0, 0, 2, 2]), np.array([0, 1, 0, 2])
    assert native_encoder.slice_tracks(group, lane, offset, made).tolist() == [10, 11, 12, 14]
    for g, la in (([3], [0]), ([-1], [0]), ([2], [3]), ([0], [-1])):  # past the groups or the tracks
        assert native_encoder.slice_tracks(np.array(g), np.array(la), offset, made) is None
    assert native_encoder.slice_tracks(group, lane[:2], offset, made) is None  # columns of other lengths
