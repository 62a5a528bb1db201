"""host_tracks' lane tracks from native_encoder.c's one pass over the live groups
(LaneTrackPass) against the tracks made one at a time and against the batch path it
replaces (track_batch of per-track columns): the same bytes; and its refusals."""

import numpy as np
import pytest
from test_track_batch import _host, _keys, _names_of, _one_at_a_time

from gpuobs.host_traces.trace import TrackKeys
from gpuobs.perfetto_export import host_tracks, native_encoder
from gpuobs.perfetto_export.trace_writer import NumberedTexts, Texts, TraceWriter

pytestmark = pytest.mark.skipif(native_encoder.encoder() is None, reason="no C compiler here")


def _only(path, monkeypatch):
    """The lane tracks by one path: "pass" with track_batch made to fail (no fallback
    can pass unnoticed), "batch" with the pass declining everything."""
    if path == "pass":

        def no_batch(*args, **kwargs):
            raise AssertionError("the lane-track pass fell back to track_batch")

        monkeypatch.setattr(TraceWriter, "track_batch", no_batch)
    else:
        monkeypatch.setattr(native_encoder.LaneTrackPass, "encode", lambda *args, **kwargs: None)


@pytest.mark.parametrize("path", ["pass", "batch"])
@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("ints", [True, False])
def test_lane_tracks_write_what_one_at_a_time_wrote(path, seed, ints, monkeypatch):
    rng = np.random.default_rng(seed)
    keys = _keys(rng, ints)
    thread_names, process_names = _names_of(rng, keys, float(rng.choice([0.0, 0.3, 1.0])))
    host = _host(np.random.default_rng(seed), keys, thread_names, process_names, ints and seed % 2 == 0)
    want = TraceWriter()
    _one_at_a_time(want, host, True)
    _only(path, monkeypatch)
    if seed % 3 == 0:  # groups over several calls: the state carried from call to call
        monkeypatch.setattr(host_tracks, "TRACK_BATCH", int(rng.integers(1, 4)))
    got = TraceWriter()
    host_tracks.write_host_trace(got, host, True)
    assert b"".join(got._chunks) == b"".join(want._chunks)
    assert got.tracks == want.tracks and got._next_uuid == want._next_uuid


def _batch_bytes(first_uuid, group, lanes, process, ranks, processes, labels):
    """The same tracks through track_batch, as _write_tracks' batch path writes them."""
    w = TraceWriter()
    w._next_uuid = first_uuid
    names, parents, tracks, merged, made, process_uuid = [], [], [], [], [], {}
    for j, (count, p) in enumerate(zip(lanes.tolist(), process.tolist())):
        if p not in process_uuid:
            process_uuid[p] = first_uuid + len(names)
            names.append(processes[p])
            parents.append(group)
            tracks.append(p)
            merged.append(False)
        for _ in range(count):
            made.append(first_uuid + len(names))
            names.append(labels[j])
            parents.append(process_uuid[p])
            tracks.append(int(ranks[j]))
            merged.append(True)
    keys = Texts.of([f"{group}-{r}" for r in tracks])
    w.track_batch(Texts.of(names), np.array(parents, np.uint64), np.array(tracks, np.uint64), keys, np.array(merged))
    return b"".join(bytes(c) for c in w._chunks), np.array(made, np.uint64)


@pytest.mark.parametrize("seed", range(10))
def test_a_pass_from_any_buffer_writes_the_batch_s_bytes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    lanes = rng.integers(1, 4, n)
    process = np.minimum(np.maximum.accumulate(rng.integers(0, 3, n)), np.arange(n))  # first use in order
    process = np.unique(process, return_inverse=True)[1].reshape(-1)
    processes = Texts.of(["", "é (pid 1)", "a\x00b", "漢字"][: int(process.max()) + 1] + ["unused"])
    ranks = np.sort(rng.choice(2**40, n, replace=False)).astype(np.uint64)
    ranks[0] = 2**64 - 1 if seed % 2 else 0
    form = rng.integers(0, 4, n).astype(np.uint8)
    pool = Texts.of([["thread é", "", "x" * 200][i % 3] for i in range(n)])
    labels = NumberedTexts(pool, form, rng.integers(0, 2**64 - 1, n, dtype=np.uint64), host_tracks.LABEL_AFFIXES)
    group = int(rng.integers(1, 2**40))
    want, want_made = _batch_bytes(7, group, lanes, process, ranks, processes, labels.texts())
    for capacity in (None, 0, 1, 7, len(want) + 100):
        c = native_encoder.LaneTrackPass(7, group, processes, f"{group}-".encode())
        got, made, tracks = c.encode(lanes, process, ranks, labels, capacity)
        assert got.tobytes() == want and np.array_equal(made, want_made)
        assert tracks == c.next_uuid - 7 == len(want_made) + int(process.max()) + 1
    # in two calls: the processes met in the first are parents in the second
    c = native_encoder.LaneTrackPass(7, group, processes, f"{group}-".encode())
    half = n // 2
    first = c.encode(lanes[:half], process[:half], ranks[:half], labels.take(slice(0, half)))
    second = c.encode(lanes[half:], process[half:], ranks[half:], labels.take(slice(half, n)))
    assert first[0].tobytes() + second[0].tobytes() == want
    assert np.array_equal(np.concatenate([first[1], second[1]]), want_made)


def test_the_pass_declines_what_it_cannot_write_and_keeps_its_state():
    processes = Texts.of(["p0", "p1", "p2"])
    labels = Texts.of(["a", "b", "c"])
    lanes, ranks = np.array([1, 2, 1]), np.arange(3, dtype=np.uint64)
    c = native_encoder.LaneTrackPass(1, 99, processes, b"99-")
    cases = [([1, 0, 0], lanes), ([0, 2, 1], lanes), ([0, -1, 0], lanes), ([0, 0, 3], lanes), ([0, 0, 1], [1, 0, 1])]
    for process, count in cases:  # out of first-use order, negative, past the names, a group with no lane
        assert c.encode(np.array(count), np.array(process), ranks, labels) is None
        assert c.next_uuid == 1 and c.t.processes_made == 0
    assert c.encode(lanes, np.array([0, 0, 1]), ranks[:2], labels) is None  # a short column
    outside = Texts(labels.chars, labels.starts + 1, labels.lengths)  # the last text past its pool
    assert c.encode(lanes, np.array([0, 0, 1]), ranks, outside) is None
    bad = native_encoder.LaneTrackPass(1, 99, Texts(processes.chars, processes.starts, processes.lengths + 5), b"99-")
    assert bad.encode(lanes, np.array([0, 0, 1]), ranks, labels) is None
    got, made, tracks = c.encode(lanes, np.array([0, 0, 1]), ranks, labels)  # declines left no trace
    assert tracks == 6 and made.tolist() == [2, 3, 4, 6] and c.next_uuid == 7


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("ints", [True, False])
def test_tracks_numbered_otherwise_or_unused_write_the_same(seed, ints):
    """write_host_trace takes every track as used without a count where the events'
    track codes are first used in order (assemble's), else counts them: the same trace
    with the codes permuted and with a track no event uses."""
    import dataclasses

    rng = np.random.default_rng(seed)
    keys = _keys(rng, ints)
    thread_names, process_names = _names_of(rng, keys, 0.3)
    host = _host(np.random.default_rng(seed), keys, thread_names, process_names, ints and seed % 2 == 0)
    want = TraceWriter()
    host_tracks.write_host_trace(want, host, True)
    tracks = list(host.tracks)
    # code c becomes perm[c] (keys that are not all ints may tie in the order, and ties keep
    # the codes' order: those only with a track added)
    perm = rng.permutation(len(tracks)) if ints else np.arange(len(tracks))
    events = host.events.rows.copy()
    events["track"] = perm[events["track"]]
    moved = [None] * len(tracks)
    for c, key in enumerate(tracks):
        moved[perm[c]] = key
    unused = ("thread", 999_999_999, 999_999_999) if ints else ("thread", "nobody", "none")
    for other in (moved, moved + [unused]):
        if isinstance(host.tracks, TrackKeys):
            other = TrackKeys(
                host.tracks.kinds,
                *(np.array(c) for c in zip(*[(host.tracks.kinds.index(k), o, la) for k, o, la in other])),
            )
        got = TraceWriter()
        host_tracks.write_host_trace(
            got, dataclasses.replace(host, events=host.events.with_rows(events), tracks=other), True
        )
        assert b"".join(got._chunks) == b"".join(want._chunks)


@pytest.mark.parametrize("seed", range(8))
def test_event_columns_in_c_are_numpy_s(seed):
    """native_encoder.event_columns (group, shifted start, end) against numpy's, wrapping
    as int64 does at its ends; declined where a track is out of range or the records are
    not EVENT's."""
    from gpuobs.host_traces.trace import EVENT

    rng = np.random.default_rng(seed)
    n, tracks = int(rng.integers(0, 300)), int(rng.integers(1, 40))
    events = np.zeros(n, EVENT)
    events["track"] = rng.integers(0, tracks, n)
    events["start_ns"] = rng.integers(-(2**62), 2**62, n) if seed % 2 else rng.integers(0, 10**12, n)
    events["dur_ns"] = rng.integers(-(10**6), 2**62 if seed % 4 == 3 else 10**6, n)
    rank = rng.permutation(tracks).astype(np.int64)
    shift = [0, -(10**9), 2**62, -(2**63)][seed % 4]
    got = native_encoder.event_columns(events, rank, shift)
    with np.errstate(over="ignore"):
        start = events["start_ns"] + np.int64(shift)
        end = np.maximum(events["dur_ns"], 0)
        end += start
    assert got is not None
    assert [c.tolist() for c in got] == [rank[events["track"]].tolist(), start.tolist(), end.tolist()]
    if n:
        bad = events.copy()
        bad["track"][-1] = tracks if seed % 2 else -1  # numpy would wrap a negative one
        assert native_encoder.event_columns(bad, rank, shift) is None
    other = np.zeros(n, [("track", "<i8"), ("start_ns", "<i8"), ("dur_ns", "<i8")])
    assert native_encoder.event_columns(other, rank, shift) is None
