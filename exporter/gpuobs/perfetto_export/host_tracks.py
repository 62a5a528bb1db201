"""A separate run's host trace (PyTorch profiler or Nsight Systems) on its own
tracks, in its own clock (REALTIME), never merged into gpuobs's process or
device tracks: its pids label tracks, they never become process tracks."""

from __future__ import annotations

from functools import partial
from operator import eq, itemgetter

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ..host_traces.pooled_names import PooledNames
from ..host_traces.trace import TrackKeys, count_in_order
from . import native_encoder
from .clock import REALTIME
from .lanes import lane_tracks
from .protowire import LEN, PACKET_SEQUENCE_FLAGS, PACKET_SEQUENCE_ID, TRACE_PACKET, VARINT, Rows, tag, varint_bytes
from .slice_encoder import Slices, write_slices
from .trace_writer import SEQ_CLEARED, TRACK_BATCH, NumberedTexts, Texts, TraceWriter

KIND_TITLES = {"pytorch-profiler": "PyTorch profiler", "nsys": "Nsight Systems"}
CATEGORY_IID = 1  # the interned name of the one debug annotation, "category"
PACKET_INTERNED_DATA = 12  # TracePacket.interned_data
INTERNED_EVENT_NAMES = 2  # InternedData.event_names
INTERN_IID, INTERN_NAME = 1, 2  # EventName.iid, EventName.name


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


def track_names_process(host, key: tuple) -> str:
    """track_names(host, key)[0]."""
    kind, owner, _ = key
    return f"GPU {owner}" if kind == "stream" else _process_name(host, owner)


def track_names(host, key: tuple) -> tuple[str, str]:
    """(process group, track) names of a host-trace track key, as the PyTorch profiler's
    trace names them in Perfetto: `python3 (pid 803)` / `thread 803 (python3)`, and
    `GPU 0` / `stream 7`; names from the trace's process_name and thread_name metadata."""
    kind, owner, lane = key
    process = track_names_process(host, key)
    thread = str(host.thread_names.get((owner, lane), "")).strip()
    if kind == "stream":
        return process, thread or f"stream {lane}"
    thread = thread or (f"thread {lane}" if isinstance(lane, int) else str(lane))
    return process, f"NVTX ({thread})" if kind == "nvtx" else thread


class _Ordered:
    """keys[order[i]] as item i, read when asked (no list of every key)."""

    def __init__(self, keys, order: np.ndarray):
        self.keys, self.order = keys, order

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i):
        return self.keys[int(self.order[i])]

    def __iter__(self):
        return map(self.keys.__getitem__, self.order.tolist())


def _int_column(values) -> np.ndarray | None:
    """Python ints (no bools, none past int64) as int64; None otherwise."""
    if not set(map(type, values)) <= {int}:
        return None
    try:
        column = np.array(values, np.int64)
    except OverflowError:
        return None
    return column


class _Keys:
    """Track keys (kind, owner, lane) as columns where owners and lanes are all ints."""

    def __init__(self, keys):
        self.keys = keys
        n = len(keys)
        if isinstance(keys, TrackKeys):
            self.owner, self.lane = keys.owner, keys.lane
            self.stream = np.array([k == "stream" for k in keys.kinds] + [False])[keys.kind]
            self.nvtx = np.array([k == "nvtx" for k in keys.kinds] + [False])[keys.kind]
            return
        kinds = list(map(itemgetter(0), keys))
        self.owner, self.lane = _int_column(list(map(itemgetter(1), keys))), _int_column(list(map(itemgetter(2), keys)))
        self.stream = np.fromiter(map(partial(eq, "stream"), kinds), bool, n)
        self.nvtx = np.fromiter(map(partial(eq, "nvtx"), kinds), bool, n)

    @property
    def ints(self) -> bool:
        return self.owner is not None and self.lane is not None

    def order(self, used: np.ndarray) -> np.ndarray:
        """`used` sorted by _track_order of their keys (stably)."""
        if not self.ints:
            return np.array(sorted(used.tolist(), key=lambda t: _track_order(self.keys[t])), np.int64)
        # number_first of an int is (False, v, str(v)): equal ints tie whatever str() says
        if len(used) == len(self.lane):  # every key (used is distinct and sorted): no gathers
            return np.lexsort((self.nvtx, self.lane, self.owner, self.stream))
        by = np.lexsort((self.nvtx[used], self.lane[used], self.owner[used], self.stream[used]))
        return used[by]


def _whole(value) -> int | None:
    """The int a thread_names key's part equals (equal numbers hash alike), or None."""
    if isinstance(value, (bool, int, np.integer)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def named_pairs(thread_names: dict, keys: list):
    """The (owner, lane) int64 pairs of thread_names' keys that can be a row's, as an
    array of 2 columns; or, where a key is odd (not two whole numbers, nor text), the
    answer itself: whether each row of `keys` is one, by lookup."""
    pairs = []
    for key in thread_names:
        parts = [_whole(v) for v in key] if isinstance(key, tuple) and len(key) == 2 else [None]
        if None in parts:
            if isinstance(key, tuple) and len(key) == 2 and not isinstance(key[0], str) and not isinstance(key[1], str):
                return None, np.array([(o, t) in thread_names for _, o, t in keys], bool)  # an odd key: as written
            continue
        if all(-(1 << 63) <= v < 1 << 63 for v in parts):
            pairs.append(parts)
    return np.array(pairs, np.int64).reshape(-1, 2), None


def _named(thread_names: dict, owner: np.ndarray, lane: np.ndarray, keys: list) -> np.ndarray:
    """Whether (owner, lane) of each row is a key of thread_names."""
    named, answer = named_pairs(thread_names, keys)
    if answer is not None:
        return answer
    if not len(named):
        return np.zeros(len(owner), bool)
    # a row is a key only where its owner is some key's owner and its lane some key's lane:
    # the pairs coded among those rows alone (few where a file names few threads)
    out = np.zeros(len(owner), bool)
    maybe = np.flatnonzero(np.isin(owner, named[:, 0]) & np.isin(lane, named[:, 1]))
    owner, lane = owner[maybe], lane[maybe]
    both_owner, oi = np.unique(np.concatenate([owner, named[:, 0]]), return_inverse=True)
    both_lane, li = np.unique(np.concatenate([lane, named[:, 1]]), return_inverse=True)
    code = oi.reshape(-1) * len(both_lane) + li.reshape(-1)
    out[maybe] = np.isin(code[: len(owner)], code[len(owner) :])
    return out


def _plain(host, keys, columns: _Keys, order_of: np.ndarray) -> np.ndarray:
    """Whether each group's label is a number's (an int lane >= 0 with no thread name)."""
    if not columns.ints:
        return np.zeros(len(order_of), bool)
    if len(order_of) == len(columns.lane):  # every key: found in the keys' own order, then ordered
        plain = columns.lane >= 0
        if host.thread_names:
            plain &= ~_named(host.thread_names, columns.owner, columns.lane, host.tracks)
        return plain[order_of]
    lane = columns.lane[order_of]
    plain = lane >= 0
    if host.thread_names:
        plain &= ~_named(host.thread_names, columns.owner[order_of], lane, keys)
    return plain


# the forms of numbered lane labels (NumberedTexts' affixes): a stream's, an NVTX thread's, a thread's
LABEL_AFFIXES = (("stream ", ""), ("NVTX (thread ", ")"), ("thread ", ""))


def _labels(host, keys, columns: _Keys, order_of: np.ndarray, plain: np.ndarray, groups: np.ndarray) -> NumberedTexts:
    """track_names(host, key)[1] of these groups' keys: those of a numbered thread or
    stream with no thread name numbered (LABEL_AFFIXES; no Python string, no pool), the
    others pooled."""
    plain = plain[groups]
    special = groups[~plain]
    labels = Texts.of([track_names(host, keys[i])[1] for i in special.tolist()])
    pool = Texts.merged([(np.flatnonzero(~plain), labels)], len(groups))
    form, numbers = np.zeros(len(groups), np.uint8), np.zeros(len(groups), np.uint64)
    if plain.any():
        at = order_of[groups[plain]]
        stream, nvtx = columns.stream[at], columns.nvtx[at]
        form[plain] = np.where(stream, 1, np.where(nvtx, 2, 3))
        numbers[plain] = columns.lane[at]  # >= 0 where plain
    return NumberedTexts(pool, form, numbers, LABEL_AFFIXES)


def _processes(host, keys: list, columns: _Keys, order_of, live: np.ndarray) -> tuple[dict, np.ndarray]:
    """Each live group's process (track_names(...)[0]) numbered by first use, and the names."""
    process_of: dict = {}  # process name -> its number, in order of first use
    if not columns.ints:
        numbers = [process_of.setdefault(track_names_process(host, keys[g]), len(process_of)) for g in live.tolist()]
        return process_of, np.array(numbers, np.int64).reshape(-1)
    # a group's process is its key's (stream, owner); groups come in track order, by
    # stream and owner first, so each pair is one run of them: a name per run
    sorted_order = order_of if len(live) == len(order_of) else np.asarray(order_of, np.int64)[live]
    owner, stream = columns.owner[sorted_order], columns.stream[sorted_order]
    new = np.ones(len(live), bool)
    np.not_equal(owner[1:], owner[:-1], out=new[1:])
    new[1:] |= stream[1:] != stream[:-1]
    del owner, stream
    first = np.flatnonzero(new)
    numbers = [process_of.setdefault(track_names_process(host, keys[g]), len(process_of)) for g in live[first].tolist()]
    return process_of, np.repeat(np.array(numbers, np.int64), np.diff(first, append=len(live)))


def _write_tracks(
    w: TraceWriter, host, group: int, keys, columns: _Keys, order_of: np.ndarray, plain: np.ndarray, lanes: np.ndarray
) -> np.ndarray:
    """The tracks new_track would make, lane by lane in group order (each process's
    track before its first thread's), all at once: the lane tracks' uuids, in order."""
    live = np.flatnonzero(lanes)
    process_of, proc = _processes(host, keys, columns, order_of, live)
    processes = Texts.of(list(process_of))
    if native_encoder.encoder() is not None:
        made = _lane_tracks_in_c(w, host, group, keys, columns, order_of, plain, lanes, live, proc, processes)
        if made is not None:
            return made
    first_g = np.full(len(process_of), len(live), np.int64)
    np.minimum.at(first_g, proc, np.arange(len(live)))
    new = np.zeros(len(live), np.int64)
    new[first_g] = 1
    count = new + lanes[live]
    at = np.zeros(len(live), np.int64)
    np.cumsum(count[:-1], out=at[1:])
    process_uuid = w._next_uuid + at[first_g]
    made = np.empty(int(lanes.sum()), np.uint64)
    done = 0
    for a in range(0, len(live), TRACK_BATCH):  # a batch of groups at a time: no column of every track
        b = min(len(live), a + TRACK_BATCH)
        owner = a + np.repeat(np.arange(b - a), count[a:b])  # each row's index in live
        is_lane = np.ones(len(owner), bool)
        is_lane[(at[a:b] - at[a])[new[a:b] == 1]] = False
        g, p = live[owner], proc[owner]
        names = NumberedTexts.merged(
            [
                (np.flatnonzero(~is_lane), processes.pick(p[~is_lane])),
                (
                    np.flatnonzero(is_lane),
                    _labels(host, keys, columns, order_of, plain, live[a:b]).take(owner[is_lane] - a),
                ),
            ],
            len(owner),
            LABEL_AFFIXES,
        )
        parents = np.where(is_lane, process_uuid[p], group)
        ranks = np.where(is_lane, g, p)
        merge_keys = NumberedTexts(None, np.ones(len(g), np.uint8), g, ((f"{group}-", ""),))  # f"{group}-{g}"
        uuids = w.track_batch(names, parents, ranks, merge_keys, merged=is_lane)
        made[done : done + int(is_lane.sum())] = uuids[is_lane]
        done += int(is_lane.sum())
    return made


def _lane_tracks_in_c(w, host, group, keys, columns, order_of, plain, lanes, live, proc, processes):
    """_write_tracks' tracks from native_encoder.c's one pass over the live groups (no
    column per track), a batch of groups at a time; None where it declines the first
    batch (then nothing is written: the numpy path's)."""
    c = native_encoder.LaneTrackPass(w._next_uuid, group, processes, f"{group}-".encode())
    made = np.empty(int(lanes[live].sum()), np.uint64)
    done = 0
    for a in range(0, len(live), TRACK_BATCH):
        b = min(len(live), a + TRACK_BATCH)
        groups = live[a:b]
        encoded = c.encode(lanes[groups], proc[a:b], groups, _labels(host, keys, columns, order_of, plain, groups))
        if encoded is None:
            if a:  # the batches before were written: the same columns cannot be declined later
                raise RuntimeError("native_encoder declined a later batch of lane tracks")
            return None
        packets, uuids, tracks = encoded
        if len(packets):
            w.raw(packets)
        made[done : done + len(uuids)] = uuids
        done += len(uuids)
        w._next_uuid = c.next_uuid
        w.tracks += tracks
    return made


def _event_columns(events: np.ndarray, rank_of_track: np.ndarray, shift_ns: int) -> tuple:
    """Each event's group (its track's rank), start (shifted) and end (start + its duration,
    none below 0): native_encoder.c's one pass over the records where it is built, else numpy."""
    if native_encoder.encoder() is not None:
        columns = native_encoder.event_columns(events, rank_of_track, shift_ns)
        if columns is not None:
            return columns
    start = events["start_ns"] + shift_ns
    end = np.maximum(events["dur_ns"], 0)
    end += start
    return rank_of_track[events["track"]], start, end


def _interned_packet(seq: int, names) -> list:
    """The sequence's first packet, as Trace.packet: the event names, iids from 1, and the
    category annotation's name, interned; the bytes of the protobuf message's
    SerializeToString (fields in number order), the names encoded by column, as the
    chunks to write one after another (the names' arrays as encoded: no copy of them)."""
    unnamed = None
    if isinstance(names, PooledNames):  # the nsys C read's: pooled already
        unnamed, text = names.none, Texts(names.chars, names.starts, names.lengths)
    else:
        if None in names:  # a NULL StringIds value: the entry has no name field, as the message leaves it
            unnamed = np.fromiter((n is None for n in names), bool, len(names))
            names = ["" if n is None else n for n in names]
        text = Texts.of(names)
    entries = []
    native = native_encoder.encoder() is not None
    for a in range(0, len(text), TRACK_BATCH):  # a batch at a time: Rows gathers with an int64 a byte
        b = min(len(text), a + TRACK_BATCH)
        present = None if unnamed is None else ~unnamed[a:b]
        # native_encoder.c where it is built (the same bytes), else numpy columns
        encoded = native_encoder.encode_interned_names(a + 1, text.take(slice(a, b)), present) if native else None
        if encoded is None:
            entry = Rows(b - a).varint_field(INTERN_IID, np.arange(a + 1, b + 1, dtype=np.uint64))
            entry.bytes_field(INTERN_NAME, text.chars, text.starts[a:b], text.lengths[a:b], present)
            encoded = Rows(b - a).message_field(INTERNED_EVENT_NAMES, entry).tobytes()
        entries.append(encoded)
    category = pb.InternedData()
    category.debug_annotation_names.add(iid=CATEGORY_IID, name="category")
    category = category.SerializeToString()
    interned = sum(map(len, entries)) + len(category)
    head = tag(PACKET_SEQUENCE_ID, VARINT) + varint_bytes(seq) + tag(PACKET_INTERNED_DATA, LEN) + varint_bytes(interned)
    tail = category + tag(PACKET_SEQUENCE_FLAGS, VARINT) + varint_bytes(SEQ_CLEARED)
    packet = len(head) + interned - len(category) + len(tail)
    return [tag(TRACE_PACKET, LEN) + varint_bytes(packet) + head, *entries, tail]


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
    if count_in_order(ev["track"]) == len(host.tracks):  # assemble's: every track used, first used in order
        used = np.arange(len(host.tracks))
    elif int(ev["track"].min()) >= 0 and int(ev["track"].max()) < len(host.tracks):
        used = np.flatnonzero(np.bincount(ev["track"], minlength=len(host.tracks)))  # np.unique's, without a sort
    else:
        used = np.unique(ev["track"])
    columns = _Keys(host.tracks)
    order_of = columns.order(used)
    keys = _Ordered(host.tracks, order_of)
    rank_of_track = np.zeros(len(host.tracks), np.int64)
    rank_of_track[order_of] = np.arange(len(order_of))
    grp, start, end = _event_columns(getattr(ev, "rows", ev), rank_of_track, shift_ns)
    plain = _plain(host, keys, columns, order_of)

    def new_tracks(lanes: np.ndarray) -> np.ndarray:
        return _write_tracks(w, host, group, keys, columns, order_of, plain, lanes)

    base = int(start.min())
    if base < 0:  # lanes take times from 0 (shifted before 1970)
        tracks = lane_tracks(
            grp, (start - base).astype(np.uint64), (end - base).astype(np.uint64), new_tracks=new_tracks
        )
    else:  # the same lanes: they are placed from the least start whatever it is
        tracks = lane_tracks(grp, start.view(np.uint64), end.view(np.uint64), new_tracks=new_tracks)
    seq = w.new_sequence()
    for chunk in _interned_packet(seq, host.names):
        w.raw(chunk)
    del grp
    # Views, not copies (the same bits as astype): a 4x nsys export held two more columns of every event.
    names = ev["name"].astype(np.uint64)
    names += np.uint64(1)
    slices = Slices(tracks.of_slice, start.view(np.uint64), end.view(np.uint64), names)
    slices.choice_arg(CATEGORY_IID, [c.encode() for c in host.categories], ev["category"])
    write_slices(w, slices, seq, clock_id=REALTIME if related else None)
    return len(ev)
