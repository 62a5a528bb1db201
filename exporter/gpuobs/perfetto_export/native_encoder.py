"""The C slice encoder, track descriptor encoder and lane assigner (native_encoder.c),
compiled on first use with the host C compiler and loaded through cffi. Without a
compiler, or with GPUOBS_PURE_PYTHON=1, slice_encoder.py, trace_writer.py and lanes.py
use numpy instead, which writes the same bytes (tests/test_slice_encoder.py and
tests/test_track_batch.py check they are identical)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from cffi import FFI

from ..native_cache import compiled_library
from ..recording_file.schema import cdef_text

SOURCE = Path(__file__).with_name("native_encoder.c")
HEADER = SOURCE.with_suffix(".h")  # its declarations: the C file includes them, cffi reads them
_FFI = FFI()
_FFI.cdef(cdef_text(HEADER.read_text()))
_CONSTANTS = {**_FFI.typeof("enum gpuobs_arg_kind").relements, **_FFI.typeof("enum gpuobs_encoder_limits").relements}
ARG_INT, ARG_BOOL, ARG_STRING = (_CONSTANTS[f"GPUOBS_ARG_{k}"] for k in ("INT", "BOOL", "STRING"))
MAX_ARGS = _CONSTANTS["GPUOBS_ENCODER_MAX_ARGS"]
LANES_TOO_MANY = _CONSTANTS["GPUOBS_LANES_TOO_MANY"]
KEYS_DO_NOT_FIT = _CONSTANTS["GPUOBS_KEYS_DO_NOT_FIT"]
MAX_LANES = 4096
# the pool of NumberedTexts without one: never read (every text numbered), but an address
_EMPTY_POOL = SimpleNamespace(chars=np.zeros(1, np.uint8), starts=np.zeros(0, np.int64), lengths=np.zeros(0, np.int64))
GPUOBS_TEXT_FORMS = _FFI.typeof("enum gpuobs_text_form_limits").relements["GPUOBS_TEXT_FORMS"]


@lru_cache(maxsize=1)
def encoder():
    """The loaded library, or None when it cannot be built or cached here (then the
    numpy encoder writes the same bytes; a cache that cannot be written says so once)."""
    return compiled_library(
        _FFI,
        "encoder",
        SOURCE,
        (HEADER,),
        cache_warning="exporting with the numpy encoder (same trace, slower). Set GPUOBS_CACHE to a writable "
        "folder to speed it up.",
    )


def _ptr(kind: str, array: np.ndarray):
    return _FFI.cast(kind, array.ctypes.data)


def assign_lanes_sorted(group: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Lanes for intervals already sorted by (group, start); None past MAX_LANES."""
    lib = encoder()
    group = np.ascontiguousarray(group, np.int64)
    start = np.ascontiguousarray(start, np.uint64)
    end = np.ascontiguousarray(end, np.uint64)
    lanes = np.empty(len(group), np.int64)
    free_at = np.zeros(MAX_LANES, np.uint64)
    width = lib.gpuobs_assign_lanes(
        len(group),
        _ptr("int64_t*", group),
        _ptr("uint64_t*", start),
        _ptr("uint64_t*", end),
        _ptr("int64_t*", lanes),
        _ptr("uint64_t*", free_at),
        MAX_LANES,
    )
    return None if width == LANES_TOO_MANY else lanes


def _times(values: np.ndarray):
    """A time column as the uint64 the numpy path makes of it (np.asarray(values,
    np.uint64)), without a copy where it is int64 already: the same bits; None where
    the numpy path should decide (negative starts, other types)."""
    values = np.asarray(values)
    if values.dtype == np.uint64:
        return np.ascontiguousarray(values)
    if values.dtype == np.int64:
        return np.ascontiguousarray(values).view(np.uint64)
    return None


def lanes(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int):
    """lanes.assign_lanes of unsorted slices in one C call: (lane per slice, lanes per
    group (n_groups of them)), or None where the numpy path must decide (a group past
    MAX_LANES lanes, groups and times past 64 bits, negative starts)."""
    lib = encoder()
    s, e = _times(start), _times(end)
    if s is None or e is None or (start.dtype == np.int64 and len(start) and int(start.min()) < 0):
        return None
    group = np.ascontiguousarray(group, np.int64)
    out = np.empty(len(group), np.int64)
    per_group = np.zeros(n_groups, np.int64)
    width = lib.gpuobs_lanes(
        len(group),
        _ptr("int64_t*", group),
        _ptr("uint64_t*", s),
        _ptr("uint64_t*", e),
        _ptr("int64_t*", out),
        _ptr("int64_t*", per_group),
        n_groups,
        MAX_LANES,
    )
    return None if width < 0 else (out, per_group)


def packet_order(start: np.ndarray, end: np.ndarray, group, base: int, bits: int):
    """slice_encoder.packet_order's sort in one C call (uint64 columns, keys known to
    fit): (slice, is_begin, time, group or None) per packet; None without scratch."""
    lib = encoder()
    n = len(start)
    slice_ = np.empty(2 * n, np.int64)
    begin = np.empty(2 * n, np.bool_)
    time = np.empty(2 * n, np.uint64)
    groups = None if group is None else np.empty(2 * n, np.int64)
    ok = lib.gpuobs_packet_order(
        n,
        _ptr("uint64_t*", start),
        _ptr("uint64_t*", end),
        _FFI.NULL if group is None else _ptr("uint64_t*", group),
        base,
        bits,
        _ptr("int64_t*", slice_),
        _ptr("uint8_t*", begin),
        _ptr("uint64_t*", time),
        _FFI.NULL if groups is None else _ptr("int64_t*", groups),
    )
    return (slice_, begin, time, groups) if ok else None


def walked_slices(start, end, base: int, bits: int, most: int, track_of_slice, seq: int, *per_slice):
    """write_slices' packets in packet_order (no groups), `most` at a time, each batch
    walked and encoded in one C call (gpuobs_encode_walked_slices_grown): track
    track_of_slice[slice], sequence seq, and per_slice as encode_slices takes them from
    name_iid on. None without scratch for the walk."""
    lib = encoder()
    n = len(start)
    walk = lib.gpuobs_packet_walk_start(n, _ptr("uint64_t*", start), _ptr("uint64_t*", end), _FFI.NULL, base, bits)
    if walk == _FFI.NULL:
        return None
    walk = _FFI.gc(walk, lib.gpuobs_packet_walk_end)
    track_of_slice = np.ascontiguousarray(track_of_slice, np.uint64)
    keep = [start, end, track_of_slice]  # read by the walk and the encoder until the last batch
    packets = _slice_columns(_FFI.new("struct gpuobs_slice_packets*"), keep, *per_slice)
    most = max(1, min(most, 2 * n))
    count = _FFI.new("size_t*")

    def batches():
        alive = (walk, keep)  # noqa: F841
        while True:
            size = _FFI.new("size_t*")
            data = lib.gpuobs_encode_walked_slices_grown(
                walk, most, packets, _ptr("uint64_t*", track_of_slice), seq, 40 * most, size, count
            )
            batch = _owned_bytes(data, size[0])
            if not count[0]:
                return
            yield batch

    return batches()


def encode_slices(
    slice,
    begin,
    ts,
    track,
    seq,
    name_iid,
    args,
    clock_id: int,
    begin_flags: int,
    flow_field: int = 0,
    flows=None,
    flow_counts=None,
) -> np.ndarray:
    """Packets i take slice/begin/ts/track/seq[i]; name_iid, flows and the args'
    columns are per slice, read at slice[i]. `args`: objects with name_iid, kind,
    present (or None), ints (a 1-d integer array, any width and stride), chars,
    starts, lengths (see slice_encoder.Arg)."""
    keep = []  # the arrays the C side reads, alive until it returns
    s = _FFI.new("struct gpuobs_slice_packets*")
    s.n = len(slice)
    s.slice = _column(keep, "int64_t*", slice, np.int64)
    s.begin = _column(keep, "uint8_t*", begin, np.uint8)
    s.ts = _column(keep, "uint64_t*", ts, np.uint64)
    s.track = _column(keep, "uint64_t*", track, np.uint64)
    s.seq = _column(keep, "uint64_t*", seq, np.uint64)
    _slice_columns(s, keep, name_iid, args, clock_id, begin_flags, flow_field, flows, flow_counts)
    return _grown(encoder().gpuobs_encode_slices_grown, s, 40 * len(slice))  # ~38 bytes a packet on nsys files


def _column(keep: list, kind: str, array, dtype):
    """A column as the C side reads it (NULL for None), kept alive in `keep`."""
    if array is None:
        return _FFI.NULL
    if array.dtype == bool and dtype == np.uint8:
        array = array.view(np.uint8)  # the same bytes
    array = np.ascontiguousarray(array, dtype)
    keep.append(array)
    return _ptr(kind, array)


def _slice_columns(s, keep: list, name_iid, args, clock_id, begin_flags, flow_field=0, flows=None, flow_counts=None):
    """The per-slice part of a struct gpuobs_slice_packets (names, arguments, flows, clock,
    flags): encode_slices' and walked_slices'. Returns s."""
    s.name_iid = _column(keep, "uint64_t*", name_iid, np.uint64)
    s.clock_id = clock_id
    s.begin_flags = begin_flags
    c_args = _FFI.new("struct gpuobs_arg[]", max(len(args), 1))
    keep.append(c_args)
    for c, a in zip(c_args, args):
        c.name_iid = a.name_iid
        c.kind = a.kind
        c.present = _column(keep, "uint8_t*", a.present, np.uint8)
        if a.ints is not None:  # read in place, through its stride
            keep.append(a.ints)
            c.ints = _FFI.cast("uint8_t*", a.ints.ctypes.data)
            c.int_stride = a.ints.strides[0]
            c.int_size = a.ints.dtype.itemsize
            c.int_signed = a.ints.dtype.kind == "i"
            c.at_least = -(2**63) if a.at_least is None else a.at_least
        c.chars = _column(keep, "uint8_t*", a.chars, np.uint8)
        c.starts = _column(keep, "int64_t*", a.starts, np.int64)
        c.lengths = _column(keep, "int64_t*", a.lengths, np.int64)
    s.n_args = len(args)
    s.args = c_args
    if flow_field:
        flows = np.asarray(flows, np.uint64).reshape(len(name_iid), -1)
        s.flow_field = flow_field
        s.flow_width = flows.shape[1]
        s.flows = _column(keep, "uint64_t*", flows, np.uint64)
        s.flow_counts = _column(keep, "int64_t*", flow_counts, np.int64)
    return s


def _grown(encode, packets, capacity: int) -> np.ndarray:
    """The bytes of one of native_encoder.c's *_grown encoders (one pass, no pass that only
    measures them), as a uint8 array over its malloc'd buffer, freed with the array."""
    size = _FFI.new("size_t*")
    return _owned_bytes(encode(packets, capacity, size), size[0])


def _owned_bytes(data, size: int) -> np.ndarray:
    """A *_grown encoder's malloc'd buffer (NULL: out of memory) as a uint8 array,
    freed with the array."""
    if data == _FFI.NULL:
        raise MemoryError("native_encoder: out of memory for encoded packets")
    owned = _FFI.gc(data, encoder().gpuobs_free, size=size)
    return np.frombuffer(_FFI.buffer(owned, size), np.uint8)  # the buffer keeps `owned` alive


def _pool_ok(chars: np.ndarray, starts: np.ndarray, lengths: np.ndarray, rows) -> bool:
    """Whether every text of `rows` (a bool mask, or None: all) lies inside its pool:
    the C side copies them without looking."""
    if rows is not None:
        starts, lengths = starts[rows], lengths[rows]
    if not len(starts):
        return True
    return bool(starts.min() >= 0 and lengths.min() >= 0 and (starts + lengths).max() <= len(chars))


def _forms(texts, rows, keep: list):
    """(pool, forms struct or NULL) of Texts or trace_writer.NumberedTexts for the C side;
    None where a form has no affixes or a pooled text of `rows` (a bool mask, None: all)
    lies outside its pool."""
    form = getattr(texts, "form", None)
    if form is None:
        return (texts, _FFI.NULL) if _pool_ok(texts.chars, texts.starts, texts.lengths, rows) else None
    n, affixes = len(form), texts.affixes
    if texts.numbers.shape != (n,) or len(affixes) > GPUOBS_TEXT_FORMS or (n and int(form.max()) > len(affixes)):
        return None
    pool = texts.pool
    in_pool = form == 0 if rows is None else (form == 0) & rows
    if pool is None:
        if in_pool.any():
            return None
        pool = _EMPTY_POOL
    elif pool.lengths.shape != (n,) or not _pool_ok(pool.chars, pool.starts, pool.lengths, in_pool):
        return None
    f = _FFI.new("struct gpuobs_text_forms*")
    chars = np.frombuffer(b"".join(p.encode() + s.encode() for p, s in affixes) or b"\0", np.uint8)
    at = 0
    for k, (prefix, suffix) in enumerate(affixes):
        f.prefix_starts[k], f.prefix_lengths[k] = at, len(prefix.encode())
        f.suffix_starts[k], f.suffix_lengths[k] = at + len(prefix.encode()), len(suffix.encode())
        at += f.prefix_lengths[k] + f.suffix_lengths[k]
    form = np.ascontiguousarray(form, np.uint8)
    numbers = np.ascontiguousarray(texts.numbers, np.uint64)
    keep += [chars, form, numbers]
    f.chars, f.form, f.numbers = _ptr("uint8_t*", chars), _ptr("uint8_t*", form), _ptr("uint64_t*", numbers)
    keep.append(f)
    return pool, f


def encode_track_descriptors(first_uuid: int, names, parents, ranks, merge_keys, merged) -> np.ndarray | None:
    """TraceWriter.track_batch's packets (tracks first_uuid, first_uuid + 1, ...) in one
    C call, as Trace.packet entries: `names` and `merge_keys` pooled Texts or NumberedTexts
    (merge_keys None: none), parents and ranks (uint64 or what converts to it) or None,
    merged a bool mask or None (all). None where a column's length is not the names' or
    a text lies outside its pool: the C side reads them without looking (the numpy path
    then raises or decides, as it did)."""
    lib = encoder()
    n = len(names)
    parents = None if parents is None else np.ascontiguousarray(parents, np.uint64)
    ranks = None if ranks is None else np.ascontiguousarray(ranks, np.uint64)
    merged = None if merged is None or merge_keys is None else np.ascontiguousarray(merged, bool)
    columns = (parents, ranks, merged)
    if any(c is not None and c.shape != (n,) for c in columns):
        return None
    keep = []  # the arrays the C side reads, alive until it returns
    name_forms = _forms(names, None, keep)
    key_forms = None if merge_keys is None or len(merge_keys) != n else _forms(merge_keys, merged, keep)
    if name_forms is None or (merge_keys is not None and key_forms is None):
        return None
    names, name_forms = name_forms
    if names.lengths.shape != (n,) and name_forms == _FFI.NULL:
        return None
    if merge_keys is not None:
        merge_keys, key_forms = key_forms
        if merge_keys.lengths.shape != (n,) and key_forms == _FFI.NULL:
            return None

    t = _FFI.new("struct gpuobs_track_descriptors*")
    t.n = n
    t.first_uuid = first_uuid
    t.name_chars = _column(keep, "uint8_t*", names.chars, np.uint8)
    t.name_starts = _column(keep, "int64_t*", names.starts, np.int64)
    t.name_lengths = _column(keep, "int64_t*", names.lengths, np.int64)
    t.name_forms = name_forms
    t.parents = _column(keep, "uint64_t*", parents, np.uint64)
    t.ranks = _column(keep, "uint64_t*", ranks, np.uint64)
    if merge_keys is not None:
        t.merge_keys = 1
        t.merged = _column(keep, "uint8_t*", merged, np.uint8)
        t.merge_chars = _column(keep, "uint8_t*", merge_keys.chars, np.uint8)
        t.merge_starts = _column(keep, "int64_t*", merge_keys.starts, np.int64)
        t.merge_lengths = _column(keep, "int64_t*", merge_keys.lengths, np.int64)
        t.merge_forms = key_forms
    return _grown(lib.gpuobs_encode_track_descriptors_grown, t, 64 * n)  # ~50 bytes a host lane track


class LaneTrackPass:
    """host_tracks' lane tracks in C (gpuobs_encode_lane_tracks_grown), a batch of live
    groups a call, the state (next uuid, processes met and their tracks) carried from
    call to call: the bytes TraceWriter.track_batch writes for the same tracks."""

    def __init__(self, first_uuid: int, group_uuid: int, processes, merge_prefix: bytes):
        self.lib = encoder()
        self.ok = _pool_ok(processes.chars, processes.starts, processes.lengths, None)  # else every call declines
        self.processes = _pooled_columns(processes)
        self.process_uuids = np.zeros(len(self.processes[1]), np.uint64)
        self.merge_prefix = np.frombuffer(merge_prefix or b"\0", np.uint8)
        self.t = _FFI.new("struct gpuobs_lane_tracks*")
        t = self.t
        t.next_uuid, t.group_uuid, t.processes_made = first_uuid, group_uuid, 0
        t.n_processes = len(self.process_uuids)
        chars, starts, lengths = self.processes
        t.process_chars, t.process_starts = _ptr("uint8_t*", chars), _ptr("int64_t*", starts)
        t.process_lengths = _ptr("int64_t*", lengths)
        t.process_uuids = _ptr("uint64_t*", self.process_uuids)
        t.merge_prefix, t.merge_prefix_length = _ptr("uint8_t*", self.merge_prefix), len(merge_prefix)

    @property
    def next_uuid(self) -> int:
        return int(self.t.next_uuid)

    def encode(self, lanes, process, ranks, labels, capacity: int | None = None):
        """(packets, the lane tracks' uuids, tracks written) of these live groups; None where
        the C side declines (a process number out of first-use order, a lane count below 1,
        a text outside its pool), with nothing written and the state as it was."""
        if not self.ok:  # the processes' pool was refused at the start: every call declines
            return None
        n = len(lanes)
        keep = []
        lanes = np.ascontiguousarray(lanes, np.int64)
        process = np.ascontiguousarray(process, np.int64)
        ranks = np.ascontiguousarray(ranks, np.uint64)
        if process.shape != (n,) or ranks.shape != (n,) or len(labels) != n:
            return None
        forms = _forms(labels, None, keep)
        if forms is None:
            return None
        pool, forms = forms
        if np.shape(pool.starts) != np.shape(pool.lengths) or (forms == _FFI.NULL and np.shape(pool.lengths) != (n,)):
            return None
        chars, starts, lengths = _pooled_columns(pool)
        made = np.empty(int(lanes.sum()) if n else 0, np.uint64)
        t = self.t
        t.n = n
        t.lanes, t.process, t.ranks = _ptr("int64_t*", lanes), _ptr("int64_t*", process), _ptr("uint64_t*", ranks)
        t.label_chars, t.label_starts = _ptr("uint8_t*", chars), _ptr("int64_t*", starts)
        t.label_lengths, t.label_forms = _ptr("int64_t*", lengths), forms
        t.made = _ptr("uint64_t*", made)
        size = _FFI.new("size_t*")
        capacity = 64 * len(made) + 64 if capacity is None else capacity  # ~50 bytes a lane track
        data = self.lib.gpuobs_encode_lane_tracks_grown(t, capacity, size)
        if data == _FFI.NULL and t.refused:
            return None
        return _owned_bytes(data, size[0]), made, int(t.tracks)


def _pooled_columns(texts):
    """A pool's (chars, starts, lengths) as the C side reads them; chars never empty (an address)."""
    chars = np.ascontiguousarray(texts.chars, np.uint8)
    return (
        chars if len(chars) else np.zeros(1, np.uint8),
        np.ascontiguousarray(texts.starts, np.int64),
        np.ascontiguousarray(texts.lengths, np.int64),
    )


def numbered(prefix: bytes, values: np.ndarray, suffix: bytes):
    """trace_writer.numbered's pool in two C calls: (chars, starts, lengths) of
    prefix + decimal(values[i]) + suffix, values uint64."""
    lib = encoder()
    values = np.ascontiguousarray(values, np.uint64)
    n = len(values)
    starts, lengths = np.empty(n, np.int64), np.empty(n, np.int64)
    args = (n, _ptr("uint64_t*", values), prefix, len(prefix), suffix, len(suffix))
    out = (_ptr("int64_t*", starts), _ptr("int64_t*", lengths))
    total = lib.gpuobs_numbered(*args, *out, _FFI.NULL)
    chars = np.empty(total, np.uint8)
    written = lib.gpuobs_numbered(*args, *out, _FFI.cast("uint8_t*", chars.ctypes.data))
    assert written == total
    return chars, starts, lengths


def encode_interned_names(first_iid: int, names, present) -> np.ndarray | None:
    """host_tracks' InternedData.event_names entries (iids first_iid, first_iid + 1, ...)
    in one C call: `names` pooled Texts, present a bool mask of the entries with a name
    (None: all). None where present's length is not the names' or a named text lies
    outside its pool (the numpy path then)."""
    lib = encoder()
    n = len(names)
    present = None if present is None else np.ascontiguousarray(present, bool)
    if len(names.lengths) != n or (present is not None and present.shape != (n,)):
        return None
    if not _pool_ok(names.chars, names.starts, names.lengths, present):
        return None
    chars = np.ascontiguousarray(names.chars, np.uint8)
    starts = np.ascontiguousarray(names.starts, np.int64)
    lengths = np.ascontiguousarray(names.lengths, np.int64)
    args = (
        n,
        first_iid,
        _ptr("uint8_t*", chars),
        _ptr("int64_t*", starts),
        _ptr("int64_t*", lengths),
        _FFI.NULL if present is None else _ptr("uint8_t*", present.view(np.uint8)),
    )
    size = lib.gpuobs_encode_interned_names(_FFI.NULL, *args)
    out = np.empty(size, np.uint8)
    written = lib.gpuobs_encode_interned_names(_FFI.cast("uint8_t*", out.ctypes.data), *args)
    assert written == size
    return out


def count_in_order(codes: np.ndarray) -> int | None:
    """host_traces/trace.py's count_in_order of a 1-d integer column (read in place,
    through its stride) in one C pass; None where the codes are not in that order."""
    k = encoder().gpuobs_count_in_order(
        _FFI.cast("uint8_t*", codes.ctypes.data),
        codes.strides[0],
        codes.dtype.itemsize,
        codes.dtype.kind == "i",
        len(codes),
    )
    return None if k < 0 else int(k)


def slice_tracks(group: np.ndarray, lane: np.ndarray, offset: np.ndarray, made: np.ndarray) -> np.ndarray | None:
    """lanes.lane_tracks' made[offset[group] + lane] in one C pass; None where a group or
    position is out of range (the numpy path then raises as it did)."""
    group, lane = np.ascontiguousarray(group, np.int64), np.ascontiguousarray(lane, np.int64)
    offset, made = np.ascontiguousarray(offset, np.int64), np.ascontiguousarray(made, np.uint64)
    if lane.shape != group.shape:
        return None
    track = np.empty(len(group), np.uint64)
    ok = encoder().gpuobs_slice_tracks(
        len(group),
        _ptr("int64_t*", group),
        _ptr("int64_t*", lane),
        _ptr("int64_t*", offset),
        len(offset),
        _ptr("uint64_t*", made),
        len(made),
        _ptr("uint64_t*", track),
    )
    return track if ok else None


def event_columns(events: np.ndarray, rank: np.ndarray, shift: int):
    """host_tracks.write_host_trace's (group, start, end) of EVENT records in one C pass,
    read where they lie; None where a field is not of EVENT's types or a track is out of
    range (numpy then)."""
    fields = events.dtype.fields or {}
    want = {"track": np.dtype("<i4"), "start_ns": np.dtype("<i8"), "dur_ns": np.dtype("<i8")}
    if events.ndim != 1 or any(name not in fields or fields[name][0] != t for name, t in want.items()):
        return None
    if not -(2**63) <= shift < 2**63:
        return None
    rank = np.ascontiguousarray(rank, np.int64)
    n = len(events)
    group, start, end = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    ok = encoder().gpuobs_event_columns(
        n,
        _FFI.cast("uint8_t*", events.ctypes.data),
        events.strides[0] if n else 0,
        fields["track"][1],
        fields["start_ns"][1],
        fields["dur_ns"][1],
        _ptr("int64_t*", rank),
        len(rank),
        shift,
        _ptr("int64_t*", group),
        _ptr("int64_t*", start),
        _ptr("int64_t*", end),
    )
    return (group, start, end) if ok else None
