"""Tracks made in one batch (TraceWriter.track_batch, host tracks' columns) write the
same bytes as tracks made one at a time (TraceWriter.track, the per-key Python of
host_tracks): random track sets with duplicate, empty, non-ASCII and
surrogate-escaped names, each through native_encoder.c and through the numpy
fallback; host traces of int and text pids and tids, thread and process names, as
lists of tuples and as TrackKeys."""

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from gpuobs.host_traces.trace import EVENT, KERNEL, TrackKeys, assemble, first_use_order
from gpuobs.perfetto_export import host_tracks, native_encoder, trace_writer
from gpuobs.perfetto_export.clock import REALTIME
from gpuobs.perfetto_export.lanes import lane_tracks
from gpuobs.perfetto_export.slice_encoder import Slices, write_slices
from gpuobs.perfetto_export.trace_writer import SEQ_CLEARED, NumberedTexts, Texts, TraceWriter, numbered
from gpuobs.safe_text import readable

ODD = [
    "",
    " ",
    "a",
    "thread 7",
    "é",
    "漢字",
    "\U0001f600",
    readable("\udcff"),
    readable("x\ud800y"),
    "a\x00b",
    "a" * 300,
]


def _names(rng, n):
    pool = ODD + [f"n{int(i)}" for i in rng.integers(0, 50, 20)]
    return [pool[int(i)] for i in rng.integers(0, len(pool), n)]


HAVE_C = native_encoder.encoder() is not None
PATHS = ["numpy", pytest.param("c", marks=pytest.mark.skipif(not HAVE_C, reason="native encoder not built here"))]


def _use(path, monkeypatch):
    """Makes track_batch take one path only: numpy as without the native build
    (GPUOBS_PURE_PYTHON=1), or C with the numpy columns made to fail, so a C call
    that declined (and fell back) cannot pass unnoticed."""
    if path == "numpy":
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
    else:

        def no_numpy(*args):
            raise AssertionError("the C encoder fell back to numpy")

        monkeypatch.setattr(TraceWriter, "_track_rows", staticmethod(no_numpy))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(12))
def test_track_batch_writes_what_track_writes(seed, path, monkeypatch):
    _use(path, monkeypatch)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    names = _names(rng, n)
    parents = rng.integers(0, 1 << int(rng.integers(1, 63)), n)
    ranks = rng.integers(0, 1 << int(rng.integers(1, 32)), n)  # sibling_order_rank is an int32
    keys = _names(rng, n)
    merged = rng.random(n) < rng.random()
    use_parents, use_ranks, use_keys, all_merged = (bool(b) for b in rng.integers(0, 2, 4))
    if all_merged:  # merged None: every track has its key
        merged[:] = True
    one, batch = TraceWriter(), TraceWriter()
    for w in (one, batch):
        w.track("before")
    for i in range(n):
        one.track(
            names[i],
            parent=int(parents[i]) if use_parents else None,
            rank=int(ranks[i]) if use_ranks else None,
            merge_key=keys[i] if use_keys and merged[i] else None,
        )
    uuids = batch.track_batch(
        Texts.of(names),
        parents if use_parents else None,
        ranks if use_ranks else None,
        Texts.of(keys) if use_keys else None,
        None if all_merged else merged if use_keys else None,
    )
    for w in (one, batch):
        w.track("after")
    assert b"".join(one._chunks) == b"".join(batch._chunks)
    assert uuids.tolist() == list(range(2, 2 + n)) and one.tracks == batch.tracks == n + 2


@pytest.mark.parametrize("path", PATHS)
def test_track_batch_batches_of_descriptors_join(path, monkeypatch):
    _use(path, monkeypatch)
    rng = np.random.default_rng(5)
    names = _names(rng, 1000)
    keys = _names(rng, 1000)
    merged = rng.random(1000) < 0.5
    parents = [int(v) for v in rng.integers(0, 1 << 62, 1000)]  # a list of ints, as callers may pass
    one, batch = TraceWriter(), TraceWriter()
    for i, name in enumerate(names):
        one.track(name, parent=parents[i], rank=3, merge_key=keys[i] if merged[i] else None)
    monkeypatch.setattr("gpuobs.perfetto_export.trace_writer.TRACK_BATCH", 7)
    batch.track_batch(Texts.of(names), parents, np.full(len(names), 3), Texts.of(keys), merged)
    assert b"".join(one._chunks) == b"".join(batch._chunks)
    assert all(len(c) for c in batch._chunks)  # no empty chunk


@pytest.mark.skipif(not HAVE_C, reason="native encoder not built here")
def test_the_c_encoder_declines_what_it_cannot_read_safely():
    """The C side copies texts without bounds checks: texts outside their pool, and
    columns shorter than the names, go back to the numpy path (None) instead."""
    names = Texts.of(["ab", "cd"])
    assert native_encoder.encode_track_descriptors(1, names, None, None, None, None) is not None
    past_end = Texts(names.chars, np.array([0, 3]), np.array([2, 2]))
    negative = Texts(names.chars, np.array([0, -1]), np.array([2, 1]))
    for bad in (past_end, negative):
        assert native_encoder.encode_track_descriptors(1, bad, None, None, None, None) is None
        assert native_encoder.encode_track_descriptors(1, names, None, None, bad, None) is None
    # a key outside its pool on a track without a key is never read: encoded
    assert native_encoder.encode_track_descriptors(1, names, None, None, past_end, np.array([True, False])) is not None
    assert native_encoder.encode_interned_names(1, past_end, np.array([True, False])) is not None  # unread
    assert native_encoder.encode_interned_names(1, past_end, None) is None
    assert native_encoder.encode_interned_names(1, names, np.array([True])) is None
    short = np.array([5])
    for args in ((short, None, None, None), (None, short, None, None), (None, None, names, np.array([True]))):
        assert native_encoder.encode_track_descriptors(1, names, *args) is None
    assert native_encoder.encode_track_descriptors(1, names, None, None, Texts.of(["k"]), None) is None


@pytest.mark.parametrize("path", PATHS)
def test_a_surrogate_fails_as_one_track_does(path, monkeypatch):
    _use(path, monkeypatch)
    with pytest.raises(UnicodeEncodeError):
        TraceWriter().track("a\udcffb")
    with pytest.raises(UnicodeEncodeError):
        TraceWriter().track_batch(Texts.of(["ok", "a\udcffb"]))


@pytest.mark.parametrize("path", PATHS)
def test_texts_numbered_and_merged(path, monkeypatch):
    if path == "numpy":
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
    else:  # the C pool, with the numpy one made to fail
        monkeypatch.setattr(trace_writer, "_numbered_numpy", None)
    values = np.array([0, 7, 10, 99, 100, 123456789012, 1 << 62])
    t = numbered("thread ", values, ")")
    assert [t[i] for i in range(len(t))] == [f"thread {v})" for v in values.tolist()]
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [rng.integers(0, 1 << rng.integers(1, 64, 200), dtype=np.uint64), np.array([2**64 - 1, 0], np.uint64)]
    )
    for prefix, suffix in (("", ""), ("é-", " 漢)"), ("a\x00", "")):
        t = numbered(prefix, values, suffix)
        assert [t[i] for i in range(len(t))] == [f"{prefix}{v}{suffix}" for v in values.tolist()]
        assert t.starts.tolist() == np.concatenate([[0], np.cumsum(t.lengths)[:-1]]).tolist()  # back to back
    assert len(numbered("x", np.zeros(0, np.int64))) == 0
    a, b = Texts.of(["x", "é", ""]), Texts.of(["漢", "yy"])
    m = Texts.merged([(np.array([4, 0, 2]), a), (np.array([1, 3]), b)], 5)
    assert [m[i] for i in range(5)] == ["é", "漢", "", "yy", "x"]
    m = Texts.merged([(np.arange(3), a), (None, b)], None)
    assert [m[i] for i in range(5)] == ["x", "é", "", "漢", "yy"]


AFFIXES = (("thread ", ""), ("NVTX (thread ", ")"), ("é-", " 漢\x00"), ("", ""))


def _numbered_texts(rng, n, pooled: bool):
    """NumberedTexts of every form (0: pooled, odd names) and the strings they stand for."""
    form = rng.integers(0 if pooled else 1, len(AFFIXES) + 1, n).astype(np.uint8)
    numbers = rng.integers(0, 2**64, n, dtype=np.uint64) >> rng.integers(0, 64, n).astype(np.uint64)
    numbers[: min(n, 2)] = [2**64 - 1, 0][: min(n, 2)]
    names = _names(rng, n)
    want = [
        names[i] if f == 0 else f"{AFFIXES[f - 1][0]}{v}{AFFIXES[f - 1][1]}"
        for i, (f, v) in enumerate(zip(form.tolist(), numbers.tolist()))
    ]
    pool = Texts.of(["" if f else name for f, name in zip(form.tolist(), names)]) if pooled else None
    return NumberedTexts(pool, form, numbers, AFFIXES), want


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(10))
def test_numbered_texts_write_what_their_strings_write(seed, path, monkeypatch):
    """track_batch of NumberedTexts (names pooled or numbered, merge keys numbered only)
    against track() of the strings; texts() against them too."""
    _use(path, monkeypatch)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    names, want_names = _numbered_texts(rng, n, True)
    keys, want_keys = _numbered_texts(rng, n, False)
    assert [names.texts()[i] for i in range(n)] == want_names and [keys.texts()[i] for i in range(n)] == want_keys
    merged = rng.random(n) < 0.6
    parents = rng.integers(0, 1 << 40, n)
    one, batch = TraceWriter(), TraceWriter()
    for i in range(n):
        one.track(want_names[i], parent=int(parents[i]), rank=i, merge_key=want_keys[i] if merged[i] else None)
    if seed % 2:
        monkeypatch.setattr("gpuobs.perfetto_export.trace_writer.TRACK_BATCH", 7)
    batch.track_batch(names, parents, np.arange(n), keys, merged)
    assert b"".join(one._chunks) == b"".join(batch._chunks)


def test_numbered_texts_merged_as_texts_merged():
    rng = np.random.default_rng(1)
    a, want_a = _numbered_texts(rng, 9, True)
    b = Texts.of(["x", "é"])
    m = NumberedTexts.merged([(np.arange(0, 18, 2), a), (np.array([17, 1]), b)], 18, AFFIXES)
    got = m.texts()
    assert [got[i] for i in range(0, 18, 2)] == want_a and [got[17], got[1]] == ["x", "é"]
    assert got[3] == ""  # a row of no part: empty, as Texts.merged leaves it
    with pytest.raises(ValueError):
        NumberedTexts.merged([(np.arange(9), a)], 9, AFFIXES[:1])


@pytest.mark.skipif(not HAVE_C, reason="native encoder not built here")
def test_the_c_encoder_declines_forms_it_cannot_write():
    """A form past the affixes, a pooled row with no pool or outside it: None (numpy)."""
    rng = np.random.default_rng(2)
    good, _ = _numbered_texts(rng, 5, True)
    assert native_encoder.encode_track_descriptors(1, good, None, None, None, None) is not None
    past = NumberedTexts(good.pool, np.full(5, len(AFFIXES) + 1, np.uint8), good.numbers, AFFIXES)
    no_pool = NumberedTexts(None, np.zeros(5, np.uint8), good.numbers, AFFIXES)
    outside = Texts(good.pool.chars, np.full(5, len(good.pool.chars)), np.ones(5, np.int64))
    numbered_only = NumberedTexts(outside, np.ones(5, np.uint8), good.numbers, AFFIXES)
    assert native_encoder.encode_track_descriptors(1, numbered_only, None, None, None, None) is not None  # unread
    short = NumberedTexts(good.pool, good.form, good.numbers[:4], AFFIXES)
    for bad in (past, no_pool, NumberedTexts(outside, np.zeros(5, np.uint8), good.numbers, AFFIXES), short):
        assert native_encoder.encode_track_descriptors(1, bad, None, None, None, None) is None
        assert native_encoder.encode_track_descriptors(1, good, None, None, bad, None) is None
    # a bad key on a track without a key is never read
    merged = np.array([False] * 5)
    assert native_encoder.encode_track_descriptors(1, good, None, None, no_pool, merged) is not None
    too_many = NumberedTexts(None, np.ones(5, np.uint8), good.numbers, AFFIXES + (("a", "b"),))
    assert native_encoder.encode_track_descriptors(1, too_many, None, None, None, None) is None


def _labels_as_it_was(host, keys, columns, order_of, plain, groups):
    """host_tracks._labels as it was: the numbered labels pooled by numbered()."""
    plain = plain[groups]
    special = groups[~plain]
    parts = [(np.flatnonzero(~plain), Texts.of([host_tracks.track_names(host, keys[i])[1] for i in special.tolist()]))]
    if plain.any():
        at = order_of[groups]
        lane, stream, nvtx = columns.lane[at], columns.stream[at], columns.nvtx[at]
        for mask, prefix, suffix in (
            (stream, "stream ", ""),
            (nvtx, "NVTX (thread ", ")"),
            (~stream & ~nvtx, "thread ", ""),
        ):
            rows = np.flatnonzero(plain & mask)
            parts.append((rows, numbered(prefix, lane[rows], suffix)))
    return Texts.merged(parts, len(groups))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("ints", [True, False])
def test_labels_numbered_are_those_pooled_before(seed, ints):
    rng = np.random.default_rng(seed)
    keys = _keys(rng, ints)
    thread_names, process_names = _names_of(rng, keys, float(rng.choice([0.0, 0.3])))
    host = _host(np.random.default_rng(seed), keys, thread_names, process_names)
    columns = host_tracks._Keys(host.tracks)
    order_of = columns.order(np.arange(len(host.tracks)))
    ordered = host_tracks._Ordered(host.tracks, order_of)
    plain = host_tracks._plain(host, ordered, columns, order_of)
    groups = rng.integers(0, len(order_of), int(rng.integers(0, 50)))  # repeated groups: lanes of one
    got = host_tracks._labels(host, ordered, columns, order_of, plain, groups).texts()
    want = _labels_as_it_was(host, ordered, columns, order_of, plain, groups)
    assert [got[i] for i in range(len(groups))] == [want[i] for i in range(len(groups))]


def _one_at_a_time(w, host, related):
    """write_host_trace as it was: tracks sorted and made one at a time in Python."""
    group = w.track(_title(host).decode(), description=_desc(host, related).decode())
    ev = host.events
    used = np.unique(ev["track"])
    order_of = sorted(used.tolist(), key=lambda t: host_tracks._track_order(host.tracks[t]))
    keys = [host.tracks[t] for t in order_of]
    rank_of_track = np.zeros(len(host.tracks), np.int64)
    rank_of_track[order_of] = np.arange(len(order_of))
    grp = rank_of_track[ev["track"]]
    start = ev["start_ns"].copy()
    end = start + np.maximum(ev["dur_ns"], 0)
    processes = {}

    def new_track(key_index):
        process, label = host_tracks.track_names(host, keys[key_index])
        if process not in processes:
            processes[process] = w.track(process, parent=group, rank=len(processes))
        return w.track(label, parent=processes[process], merge_key=f"{group}-{key_index}", rank=key_index)

    tracks = lane_tracks(grp, start.view(np.uint64), end.view(np.uint64), new_track)
    seq = w.new_sequence()
    first = pb.TracePacket(trusted_packet_sequence_id=seq, sequence_flags=SEQ_CLEARED)
    for i, name in enumerate(host.names):
        first.interned_data.event_names.add(iid=i + 1, name=name)
    first.interned_data.debug_annotation_names.add(iid=host_tracks.CATEGORY_IID, name="category")
    w.packet(first)
    names = ev["name"].astype(np.uint64) + np.uint64(1)
    slices = Slices(tracks.of_slice, start.view(np.uint64), end.view(np.uint64), names)
    slices.choice_arg(host_tracks.CATEGORY_IID, [c.encode() for c in host.categories], ev["category"])
    write_slices(w, slices, seq, clock_id=REALTIME if related else None)


def _host(rng, keys, thread_names, process_names, columns=False):
    n = int(rng.integers(1, 400))
    events = np.zeros(n, EVENT)
    events["start_ns"] = rng.integers(0, 10**6, n)
    events["dur_ns"] = rng.integers(0, 10**5, n)
    events["track"] = rng.integers(0, len(keys), n)
    names = _names(rng, 30)
    events["name"] = rng.integers(0, len(names), n)
    events["category"] = rng.integers(0, 3, n)
    tracks = keys
    if columns:
        kinds = ("stream", "thread", "nvtx")
        tracks = TrackKeys(
            kinds, [kinds.index(k) for k, _, _ in keys], [o for _, o, _ in keys], [t for _, _, t in keys]
        )
    return assemble(
        "/x/run.sqlite",
        "nsys",
        events,
        np.zeros(0, KERNEL),
        names,
        tracks,
        ["kernel", "cpu_op", "nvtx"],
        thread_names,
        process_names=process_names,
    )


def _keys(rng, ints: bool):
    n = int(rng.integers(1, 120))
    kinds = ["stream", "thread", "nvtx"] if ints else ["stream", "thread", "nvtx", "other"]
    owners = [0, 1, 803, 804, 2**40] if ints else [0, 1, 803, "Spans", "GPU 0", "", 2**70, True, -3]
    lanes = [0, 1, 7, 803, 9999, 2**33, -1] if ints else [0, 7, "main", "", -5, 2**70, True, 1.5]
    keys = {
        (kinds[int(a)], owners[int(b)], lanes[int(c)])
        for a, b, c in zip(*(rng.integers(0, len(x), n) for x in (kinds, owners, lanes)))
    }
    keys = sorted(keys, key=repr)
    rng.shuffle(keys)
    return [tuple(k) for k in keys]


def _names_of(rng, keys, share):
    thread_names = {}
    for _, o, t in keys:
        if rng.random() < share:
            thread_names[(o, t)] = _names(rng, 1)[0] + (" " if rng.random() < 0.2 else "")
    if rng.random() < 0.3:
        thread_names[(12345, 54321)] = "nobody"
    process_names = {o: _names(rng, 1)[0] for _, o, _ in keys if rng.random() < share}
    return thread_names, process_names


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("ints", [True, False])
def test_host_tracks_write_what_one_at_a_time_wrote(seed, ints):
    rng = np.random.default_rng(seed)
    keys = _keys(rng, ints)
    thread_names, process_names = _names_of(rng, keys, float(rng.choice([0.0, 0.3, 1.0])))
    if ints and rng.random() < 0.3:  # keys equal to an int key: a float, a bool
        thread_names[(float(keys[0][1]), keys[0][2])] = "as a float"
        thread_names[(True, 1)] = "as a bool"
    for columns in [False, True] if ints else [False]:
        host = _host(np.random.default_rng(seed), keys, dict(thread_names), dict(process_names), columns)
        want, got = TraceWriter(), TraceWriter()
        _one_at_a_time(want, host, True)
        host_tracks.write_host_trace(got, host, True)
        want_bytes, got_bytes = b"".join(want._chunks), b"".join(got._chunks)
        assert got_bytes == want_bytes


def _title(host):
    return f"Nsight Systems run: {host.path.rsplit('/', 1)[-1]}".encode()


def _desc(host, related):
    how = (
        "on its own REALTIME clock"
        if related
        else "with no clock relation in this trace: trace time is its raw REALTIME ns"
    )
    return (
        f"{host.path}: a separate, uninstrumented run (Nsight Systems), {how}. "
        f"0 of its 0 kernels matched gpuobs launches (name, grid, block, order)."
    ).encode()


@pytest.mark.parametrize("seed", range(6))
def test_host_tracks_in_small_batches_of_groups(seed, monkeypatch):
    rng = np.random.default_rng(100 + seed)
    keys = _keys(rng, True)
    thread_names, process_names = _names_of(rng, keys, 0.3)
    host = _host(np.random.default_rng(seed), keys, thread_names, process_names, True)
    want, got = TraceWriter(), TraceWriter()
    _one_at_a_time(want, host, False)
    monkeypatch.setattr(host_tracks, "TRACK_BATCH", int(rng.integers(1, 5)))
    host_tracks.write_host_trace(got, host, False)
    assert b"".join(got._chunks) == b"".join(want._chunks)


@pytest.mark.parametrize("big", [0, 1 << 28, 1 << 40])
def test_track_keys_distinct_by_code_and_by_sort(big):
    rng = np.random.default_rng(big % 97)
    kind, owner, lane = rng.integers(0, 3, 5000), rng.integers(0, 40, 5000) + big, rng.integers(0, 60, 5000)
    keys, index = TrackKeys.distinct(("stream", "thread", "nvtx"), kind, owner, lane)
    rows = list(zip(kind.tolist(), owner.tolist(), lane.tolist()))
    assert [(keys.kinds.index(k), o, t) for k, o, t in keys] == sorted(set(rows))
    assert [keys[i] for i in index.tolist()] == [(keys.kinds[k], o, t) for k, o, t in rows]


@pytest.mark.parametrize("big", [0, 1 << 30])
def test_track_keys_of_parts_as_distinct_of_them_all(big):
    rng = np.random.default_rng(big % 89)
    parts = [
        (k, rng.integers(0, 30, m) + big * (k == 0), rng.integers(0, 30, m)) for k, m in ((0, 500), (1, 0), (2, 700))
    ]
    got, got_index = TrackKeys.of_parts(("stream", "thread", "nvtx"), parts)
    kind = np.concatenate([np.full(len(p[1]), p[0]) for p in parts])
    owner, lane = (np.concatenate([p[i] for p in parts]) for i in (1, 2))
    want, want_index = TrackKeys.distinct(("stream", "thread", "nvtx"), kind, owner, lane)
    assert got == list(want) and got_index.tolist() == want_index.tolist()


def _of_codes_copying(kinds, code):
    """TrackKeys._of_codes as it was: an intp index, each part taken out by astype copies."""
    distinct, index = np.unique(code, return_inverse=True)
    low = np.uint64((1 << 28) - 1)
    parts = (distinct >> np.uint64(56), (distinct >> np.uint64(28)) & low, distinct & low)
    return TrackKeys(kinds, *(p.astype(np.int64) for p in parts)), index.reshape(-1)


@pytest.mark.parametrize("seed", range(6))
def test_track_keys_of_codes_as_the_copying_one(seed):
    """_of_codes' parts taken out in place (views of the distinct codes) and its int32
    index: the same keys and index as the copies of the code it replaces, rising codes
    (no sort), a few runs and shuffled, owners and lanes up to 2^28 - 1."""
    from gpuobs.host_traces.trace import _code

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 4000)) if seed else 0
    kind = rng.integers(0, 3, n)
    owner, lane = rng.integers(0, 1 << 28, n), rng.integers(0, 1 << 28, n)
    if n:
        owner[0], lane[-1] = (1 << 28) - 1, (1 << 28) - 1
    code = _code(kind, owner, lane)
    code = [np.sort(code), np.concatenate([np.sort(c) for c in np.array_split(code, 3)]), code][seed % 3]
    kinds = ("stream", "thread", "nvtx")
    got, got_index = TrackKeys._of_codes(kinds, code.copy())
    want, want_index = _of_codes_copying(kinds, code)
    assert got_index.dtype == np.int32 and got_index.tolist() == want_index.tolist()
    for column in ("kind", "owner", "lane"):
        g, w = getattr(got, column), getattr(want, column)
        assert g.dtype == np.int64 and np.array_equal(g, w)
    assert got == list(want)


def test_track_keys_read_as_their_tuples():
    keys, index = TrackKeys.distinct(("stream", "thread"), [1, 0, 1, 1], [5, 2, 5, 3], [7, 9, 7, 1])
    assert list(keys) == [("stream", 2, 9), ("thread", 3, 1), ("thread", 5, 7)] == keys
    assert [keys[i] for i in index.tolist()] == [("thread", 5, 7), ("stream", 2, 9), ("thread", 5, 7), ("thread", 3, 1)]
    codes = np.array([2, 2, 0, 1, 0])
    rank, ordered = first_use_order(codes, keys)
    want_rank, want = first_use_order(codes, list(keys))
    assert rank.tolist() == want_rank.tolist() and list(ordered) == want


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("count", [0, 1, 200])
@pytest.mark.parametrize("batch", [7, 1 << 16])
def test_interned_names_packet_is_the_messages(count, batch, path, monkeypatch):
    if path == "numpy":
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
    else:  # the C entries, with the numpy columns made to fail
        monkeypatch.setattr(host_tracks, "Rows", None)
    monkeypatch.setattr(host_tracks, "TRACK_BATCH", batch)
    names = _names(np.random.default_rng(count), count)
    if count > 1:
        names[::3] = [None] * len(names[::3])  # a NULL StringIds value: no name field
    first = pb.TracePacket(trusted_packet_sequence_id=7, sequence_flags=SEQ_CLEARED)
    for i, name in enumerate(names):
        first.interned_data.event_names.add(iid=i + 1, name=name)
    first.interned_data.debug_annotation_names.add(iid=host_tracks.CATEGORY_IID, name="category")
    want = TraceWriter()
    want.packet(first)
    assert b"".join(host_tracks._interned_packet(7, names)) == b"".join(want._chunks)


def test_field_numbers_are_the_protos():
    track = pb.TrackDescriptor.DESCRIPTOR.fields_by_name
    assert [track[f].number for f in ("uuid", "name", "parent_uuid", "sibling_order_rank")] == [1, 2, 5, 12]
    assert [track[f].number for f in ("sibling_merge_behavior", "sibling_merge_key")] == [15, 16]
    assert pb.TracePacket.DESCRIPTOR.fields_by_name["track_descriptor"].number == 60
    assert pb.TracePacket.DESCRIPTOR.fields_by_name["interned_data"].number == host_tracks.PACKET_INTERNED_DATA
    assert pb.InternedData.DESCRIPTOR.fields_by_name["event_names"].number == host_tracks.INTERNED_EVENT_NAMES
    event_name = pb.EventName.DESCRIPTOR.fields_by_name
    assert (event_name["iid"].number, event_name["name"].number) == (host_tracks.INTERN_IID, host_tracks.INTERN_NAME)


def _named_as_it_was(thread_names, owner, lane, keys):
    """host_tracks._named before it coded only the rows that could be keys (the keys'
    pairs taken as it takes them: that part did not change)."""
    named, answer = host_tracks.named_pairs(thread_names, keys)
    if answer is not None:
        return answer
    if not len(named):
        return np.zeros(len(owner), bool)
    both_owner, oi = np.unique(np.concatenate([owner, named[:, 0]]), return_inverse=True)
    both_lane, li = np.unique(np.concatenate([lane, named[:, 1]]), return_inverse=True)
    code = oi.reshape(-1) * len(both_lane) + li.reshape(-1)
    return np.isin(code[: len(owner)], code[len(owner) :])


@pytest.mark.parametrize("seed", range(12))
def test_named_rows_as_every_row_coded(seed):
    """_named among the rows whose owner and lane are each some key's: the rows every row's
    code found (owners and lanes shared by keys crosswise, none, all, int64's ends)."""
    rng = np.random.default_rng(seed)
    values = np.array([0, 1, 2, 3, 803, -1, -(1 << 63), (1 << 63) - 1, 1 << 40], np.int64)
    n = int(rng.integers(0, 300))
    owner, lane = rng.choice(values, n), rng.choice(values, n)
    thread_names = {
        (int(o), int(t)): "t" for o, t in zip(rng.choice(values, int(rng.integers(0, 6))), rng.choice(values, 6))
    }
    if seed % 4 == 1:
        thread_names[(float(owner[0]) if n else 1.0, True)] = "a float and a bool"
    keys = [("thread", int(o), int(t)) for o, t in zip(owner, lane)]
    got = host_tracks._named(thread_names, owner, lane, keys)
    want = _named_as_it_was(thread_names, owner, lane, keys)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def _processes_as_it_was(host, keys, columns, order_of, live):
    process_of: dict = {}
    sorted_order = np.asarray(order_of, np.int64)[live]
    _, owner = np.unique(columns.owner[sorted_order], return_inverse=True)
    code = owner.reshape(-1) * 2 + columns.stream[sorted_order]
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    number = np.zeros(len(first), np.int64)
    for d in np.argsort(first, kind="stable").tolist():
        number[d] = process_of.setdefault(
            host_tracks.track_names_process(host, keys[int(live[first[d]])]), len(process_of)
        )
    return process_of, number[inverse.reshape(-1)]


@pytest.mark.parametrize("seed", range(12))
def test_processes_numbered_as_by_owner_ranks(seed):
    """_processes with owners as they are where 2 * owner fits (else ranked, as before):
    owners from int64's least to its greatest, negative, 2^62, rising and shuffled keys."""
    rng = np.random.default_rng(seed)
    owners = [0, 1, 803, 2**40, 2**62 - 1] + ([-3, 2**62, 2**63 - 1, -(2**63)] if seed % 2 else [])
    keys = sorted(
        {
            (str(rng.choice(["stream", "thread", "nvtx"])), int(rng.choice(owners)), int(rng.integers(0, 9)))
            for _ in range(80)
        }
    )
    if seed % 3:
        rng.shuffle(keys)
    kinds = ("stream", "thread", "nvtx")
    tracks = TrackKeys(kinds, [kinds.index(k) for k, _, _ in keys], [o for _, o, _ in keys], [t for _, _, t in keys])
    host = _host(rng, keys, {}, {o: f"p{o}" for _, o, _ in keys if o % 3 == 0}, columns=False)
    columns = host_tracks._Keys(tracks)
    order_of = columns.order(np.arange(len(keys)))
    live = np.flatnonzero(rng.random(len(keys)) < 0.7)
    got = host_tracks._processes(host, keys, columns, order_of, live)
    want = _processes_as_it_was(host, keys, columns, order_of, live)
    assert got[0] == want[0] and got[1].tolist() == want[1].tolist()
