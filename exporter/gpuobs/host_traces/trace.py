"""A host trace once read: events and kernels as numpy columns, names, tracks and
categories stored once each. A 200 MB trace holds millions of events; as Python
objects they took ten times the file, as columns they take a fraction of it.
Code that wants records still iterates them (`for e in trace.events`)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from ..errors import GpuobsError
from ..recording_file.recording_checks import TIME_LIMIT_NS
from ..safe_text import _SURROGATE, readable
from .pooled_names import PooledNames

EVENT = np.dtype([("start_ns", "<i8"), ("dur_ns", "<i8"), ("track", "<i4"), ("name", "<i4"), ("category", "<i4")])
KERNEL = np.dtype(
    [
        ("device", "<i8"),
        ("stream", "<i8"),
        ("name", "<i4"),
        ("grid", "<i8", (3,)),
        ("block", "<i8", (3,)),
        ("start_ns", "<i8"),
        ("dur_ns", "<i8"),
        ("correlation", "<i8"),
    ]
)
NO_DIMS = (-1, -1, -1)  # grid or block not given: matches no launch
FEW_RUNS = 64  # unique_inverse sorts values rising in at most this many + 1 runs itself
IN_ORDER_BLOCK = 1 << 16  # codes checked for first-use order this many at a time
MAX_CATEGORY_CHARS = 64  # categories are short names ("kernel", "cpu_op"); each event carries its own copy


class HostTraceError(GpuobsError):
    pass


@dataclass
class HostEvent:
    """One event of a host trace, as a record (HostTrace.events hands these out)."""

    track: tuple  # ("thread"|"nvtx", pid, tid) or ("stream", device, stream)
    name: str
    start_ns: int  # REALTIME
    dur_ns: int
    category: str


@dataclass
class HostKernel:
    """One kernel of a host trace, as a record (HostTrace.kernels hands these out)."""

    device: int
    stream: int
    name: str
    grid: tuple
    block: tuple
    start_ns: int  # REALTIME
    dur_ns: int
    correlation: int


class Rows:
    """The rows of a numpy structured array, read as records one at a time
    (`for e in trace.events`, `trace.kernels[i]`: a HostEvent or HostKernel) while
    every column stays numpy (`trace.events["start_ns"]`)."""

    def __init__(self, rows: np.ndarray, record):
        self.rows = rows
        self._record = record

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        return self.rows[key] if isinstance(key, str) else self._record(self.rows[key])

    def __iter__(self):
        return map(self._record, self.rows)

    def with_rows(self, rows: np.ndarray) -> "Rows":
        """The same kind of rows, other values (e.g. shifted times)."""
        return Rows(rows, self._record)


class TrackKeys:
    """Distinct track keys (kinds[kind[i]], owner[i], lane[i]) with int owners and lanes,
    as columns: a list of tuples to read (`keys[i]`, `for k in keys`, `==` a list) with
    no tuple held per key (an nsys file can hold a thread per row)."""

    def __init__(self, kinds: tuple, kind: np.ndarray, owner: np.ndarray, lane: np.ndarray):
        self.kinds, self.kind = tuple(kinds), np.asarray(kind, np.int64)
        self.owner, self.lane = np.asarray(owner, np.int64), np.asarray(lane, np.int64)

    @classmethod
    def distinct(cls, kinds: tuple, kind, owner, lane) -> tuple["TrackKeys", np.ndarray]:
        """The distinct keys of these rows and each row's key's index among them."""
        kind, owner, lane = (np.asarray(c, np.int64) for c in (kind, owner, lane))
        if len(kind) and min(int(c.min()) for c in (kind, owner, lane)) >= 0:
            if int(kind.max()) < 8 and max(int(owner.max()), int(lane.max())) < 1 << 28:  # one 64-bit code a key
                return cls._of_codes(kinds, _code(kind, owner, lane))
        order = np.lexsort((lane, owner, kind))
        k, o, la = kind[order], owner[order], lane[order]
        new = np.ones(len(order), bool)
        new[1:] = (k[1:] != k[:-1]) | (o[1:] != o[:-1]) | (la[1:] != la[:-1])
        index = np.empty(len(order), np.int64)
        index[order] = np.cumsum(new) - 1
        return cls(kinds, k[new], o[new], la[new]), index

    @classmethod
    def of_parts(cls, kinds: tuple, parts: list) -> tuple["TrackKeys", np.ndarray]:
        """distinct() of parts' rows one after another, each part (kind number, owners, lanes)."""
        small = all(
            not len(o) or (min(int(o.min()), int(la.min())) >= 0 and max(int(o.max()), int(la.max())) < 1 << 28)
            for _, o, la in parts
        )
        if not small or len(kinds) > 8:
            columns = [np.concatenate([np.full(len(o), k) for k, o, _ in parts])]
            columns += [np.concatenate([p[i] for p in parts]) for i in (1, 2)]
            return cls.distinct(kinds, *columns)
        code = np.empty(sum(len(o) for _, o, _ in parts), np.uint64)
        at = 0
        for k, o, la in parts:  # written in place: no column of every key's kind, owner and lane
            code[at : at + len(o)] = _code(k, o, la)
            at += len(o)
        return cls._of_codes(kinds, code)

    @classmethod
    def _of_codes(cls, kinds: tuple, code: np.ndarray) -> tuple["TrackKeys", np.ndarray]:
        """distinct() of codes made by _code; the index int32 where every row fits it."""
        distinct, index = unique_inverse(code, index_dtype=np.int32 if len(code) < 1 << 31 else np.intp)
        del code
        # the parts taken out in place and read as int64 (each < 2^28): two new columns, no copies
        # (each full-size array first touched costs its page faults)
        kind = distinct >> np.uint64(56)
        owner = distinct >> np.uint64(28)
        low = np.uint64((1 << 28) - 1)
        owner &= low
        distinct &= low
        return cls(kinds, kind.view(np.int64), owner.view(np.int64), distinct.view(np.int64)), index.reshape(-1)

    def __len__(self) -> int:
        return len(self.kind)

    def __getitem__(self, i) -> tuple:
        return self.kinds[self.kind[i]], int(self.owner[i]), int(self.lane[i])

    def __iter__(self):
        kinds = self.kinds
        return zip(map(kinds.__getitem__, self.kind.tolist()), self.owner.tolist(), self.lane.tolist())

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def take(self, index) -> "TrackKeys":
        return TrackKeys(self.kinds, self.kind[index], self.owner[index], self.lane[index])


def unique_inverse(values: np.ndarray, return_index: bool = False, index_dtype=np.intp) -> tuple:
    """np.unique(values, return_inverse=True) of a 1-D array (with return_index, its first
    rows too, between the two): the same arrays, without a sort where the values already
    rise (keys numbered in order: an nsys file's rowids), by a stable sort where they rise
    in a few runs (tables one after another: the sort merges runs), else np.unique's.
    The inverse is of index_dtype (np.unique's intp unless asked: an int32 one is half
    the memory to touch)."""
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iub":
        return _unique_inverse_of(values, return_index, index_dtype)
    descents = int(np.count_nonzero(values[1:] < values[:-1]))
    if descents > FEW_RUNS:
        return _unique_inverse_of(values, return_index, index_dtype)
    order = np.argsort(values, kind="stable") if descents else None  # equal values: the first row first
    ordered = values[order] if descents else values
    new = np.empty(len(values), bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    index = np.cumsum(new, dtype=index_dtype)
    index -= 1
    distinct = ordered[new]
    if descents:
        index[order] = index.copy()
    if not return_index:
        return distinct, index
    return distinct, order[new] if descents else np.flatnonzero(new), index


def _unique_inverse_of(values: np.ndarray, return_index: bool, index_dtype) -> tuple:
    """np.unique's answer, its inverse as index_dtype."""
    *out, index = np.unique(values, return_index=return_index, return_inverse=True)
    return (*out, index.astype(index_dtype, copy=False))


def _code(kind, owner: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """(kind, owner, lane), each in [0, 2^28) (kind below 8), as one uint64 in their order."""
    code = np.asarray(owner, np.int64).astype(np.uint64)
    code <<= np.uint64(28)
    code |= np.asarray(lane, np.int64).astype(np.uint64)
    code |= np.asarray(kind, np.int64).astype(np.uint64) << np.uint64(56)
    return code


@dataclass
class HostTrace:
    path: str
    kind: str  # "pytorch-profiler" or "nsys"
    events: Rows  # EVENT rows (HostEvent records), kernels included; times on REALTIME
    kernels: Rows  # KERNEL rows (HostKernel records), in start order
    names: list  # the "name" columns index this; a list, or PooledNames (read as one) from the nsys C read
    tracks: list  # events["track"] indexes this: ("thread"|"nvtx", pid, tid) or ("stream", device, stream);
    # a list, or TrackKeys (columns read as such a list) from the nsys C read
    categories: list  # events["category"] indexes this
    thread_names: dict = field(default_factory=dict)  # (pid, tid) -> name
    clock: str = "REALTIME"
    base_ns: int | None = None  # a Kineto trace's baseTimeNanoseconds
    process_names: dict = field(default_factory=dict)  # pid -> name


class HostTraceBuilder:
    """Collects events and kernels one at a time into compact columns, each name,
    track and category stored once. Callers check values first: times within
    [0, 2^62) ns, durations not negative."""

    def __init__(self):
        self._names: dict = {}
        self._tracks: dict = {}
        self._categories: dict = {}
        self._events = {name: array("q" if EVENT[name].itemsize == 8 else "i") for name in EVENT.names}
        self._kernels = {name: array("q") for name in ("device", "stream", "name", "start_ns", "dur_ns", "correlation")}
        self._dims = array("q")  # grid then block, six per kernel

    @staticmethod
    def _intern(table: dict, key) -> int:
        index = table.get(key)
        if index is None:
            index = table[key] = len(table)
        return index

    def name(self, text: str) -> int:
        return self._intern(self._names, text)

    def event(self, track: tuple, name: str, start_ns: int, dur_ns: int, category: str) -> None:
        e = self._events
        e["start_ns"].append(start_ns)
        e["dur_ns"].append(dur_ns)
        e["track"].append(self._intern(self._tracks, track))
        e["name"].append(self.name(name))
        e["category"].append(self._intern(self._categories, category))

    def kernel(
        self,
        device: int,
        stream: int,
        name: str,
        grid: tuple,
        block: tuple,
        start_ns: int,
        dur_ns: int,
        correlation: int,
    ) -> None:
        """A kernel, also an event on its stream's track."""
        k = self._kernels
        for key, value in (
            ("device", device),
            ("stream", stream),
            ("name", self.name(name)),
            ("start_ns", start_ns),
            ("dur_ns", dur_ns),
            ("correlation", correlation),
        ):
            k[key].append(value)
        self._dims.extend(grid)
        self._dims.extend(block)
        self.event(("stream", device, stream), name, start_ns, dur_ns, "kernel")

    def end_ns(self) -> np.ndarray:
        """Where each event so far ends, as given (before build's offset)."""
        return np.frombuffer(self._events["start_ns"], np.int64) + np.frombuffer(self._events["dur_ns"], np.int64)

    def build(
        self,
        path,
        kind: str,
        thread_names: dict | None = None,
        base_ns: int | None = None,
        offset_ns: int = 0,
        process_names: dict | None = None,
    ) -> HostTrace:
        """`offset_ns` is added to every start (Kineto's times are from its base)."""
        events = np.zeros(len(self._events["start_ns"]), EVENT)
        for key, column in self._events.items():
            events[key] = np.frombuffer(column, EVENT[key]) if len(column) else 0
        kernels = np.zeros(len(self._kernels["start_ns"]), KERNEL)
        for key, column in self._kernels.items():
            kernels[key] = np.frombuffer(column, np.int64) if len(column) else 0
        dims = np.frombuffer(self._dims, np.int64).reshape(-1, 6) if len(self._dims) else np.zeros((0, 6), np.int64)
        kernels["grid"], kernels["block"] = dims[:, :3], dims[:, 3:]
        return assemble(
            path,
            kind,
            events,
            kernels,
            list(self._names),
            list(self._tracks),
            list(self._categories),
            thread_names,
            base_ns,
            offset_ns,
            process_names,
        )


def first_use_order(codes: np.ndarray, values: list) -> tuple[np.ndarray, list]:
    """Each code's new number, in the order rows first use them, and the values in that
    order, each once (codes of equal values merge; unused ones drop): what interning
    row by row would have given."""
    rank = np.full(len(values), -1, np.int64)
    if not len(codes):
        return rank, values.take(np.zeros(0, np.int64)) if isinstance(values, (TrackKeys, PooledNames)) else []
    if isinstance(values, PooledNames):
        if codes.dtype.kind in "iu" and int(codes.min()) >= 0 and int(codes.max()) < len(values):
            return _first_use_of_pooled(codes, values)
        values = list(values)  # codes that are not the pool's: as a list
    if codes.dtype.kind in "iu" and int(codes.min()) >= 0 and int(codes.max()) < len(values):
        # each code's first row in one pass (np.unique sorted every row; the same codes, the same rows)
        first = np.full(len(values), len(codes), np.int64)
        np.minimum.at(first, codes, np.arange(len(codes)))
        used = np.flatnonzero(first < len(codes))
        first = first[used]
    else:
        used, first = np.unique(codes, return_index=True)
    if not np.all(first[1:] > first[:-1]):  # else codes first used in their own order: no sort
        used = used[np.argsort(first, kind="stable")]
    every = len(used) == len(values) and bool(np.all(used == np.arange(len(used))))  # each code, in order
    if isinstance(values, TrackKeys):  # distinct keys: first use alone orders them
        rank[used] = np.arange(len(used))
        return rank, TrackKeys(values.kinds, values.kind, values.owner, values.lane) if every else values.take(used)
    ordered = used.tolist()
    in_order = list(values) if every else list(map(values.__getitem__, ordered)) if ordered else []
    if len(set(in_order)) == len(in_order):  # no two equal: nothing merges (no dict of every value)
        rank[ordered] = np.arange(len(ordered))
        return rank, in_order
    number: dict = {}
    for code in ordered:
        rank[code] = number.setdefault(values[code], len(number))
    return rank, list(number)


def _first_use_of_pooled(codes: np.ndarray, names: PooledNames) -> tuple[np.ndarray, PooledNames]:
    """first_use_order of pooled names: equal ones found by the pool (merged_with: no
    Python string per numbered name), each group numbered at its first use."""
    rank = np.full(len(names), -1, np.int64)
    first = np.full(len(names), len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    used_codes = first < len(codes)
    to = names.merged_with()
    if to is not None:  # a group's first use: its earliest member's, on its first name
        group_first = np.full(len(names), len(codes), np.int64)
        np.minimum.at(group_first, to, first)
        first = group_first
    used = np.flatnonzero(first < len(codes))
    if not np.all(first[used][1:] > first[used][:-1]):  # else first used in their own order
        used = used[np.argsort(first[used], kind="stable")]
    rank[used] = np.arange(len(used))
    if to is not None:
        rank = np.where(used_codes, rank[to], -1)
    return rank, names.take(used)


def count_in_order(codes: np.ndarray) -> int | None:
    """k where the codes first use 0, 1, ..., k-1 in that order (each code past the greatest
    so far is the next number: the nsys C read's tracks and names, numbered as they come),
    else None. Read a block at a time: no full-size temporary (each costs its page faults)."""
    if codes.dtype.kind not in "iu" or not len(codes):
        return None
    if codes.ndim == 1 and codes.dtype.itemsize in (1, 2, 4, 8) and codes.dtype.isnative:  # C reads native ints
        from ..perfetto_export import native_encoder  # loaded by the export anyway; no protobuf

        if native_encoder.encoder() is not None:  # one pass of C, the same answer
            return native_encoder.count_in_order(codes)
    top = -1
    for a in range(0, len(codes), IN_ORDER_BLOCK):
        greatest = np.maximum.accumulate(codes[a : a + IN_ORDER_BLOCK], dtype=np.int64)
        np.maximum(greatest, top, out=greatest)  # the greatest so far, earlier blocks too
        if int(greatest[0]) > top + 1 or int(codes[a : a + IN_ORDER_BLOCK].min()) < 0:
            return None
        if len(greatest) > 1 and bool((greatest[1:] - greatest[:-1] > 1).any()):
            return None
        top = max(top, int(greatest[-1]))
    return top + 1


def _first_use_kept(codes: np.ndarray, values):
    """The values first_use_order would give where its rank would keep every code as it
    is (codes in order by count_in_order, no two of the values they use equal), else
    None: no pass over the codes but the check."""
    k = count_in_order(codes)
    if k is None or k > len(values):
        return None
    if isinstance(values, TrackKeys):  # distinct keys
        return (
            values.take(slice(0, k))
            if k < len(values)
            else TrackKeys(values.kinds, values.kind, values.owner, values.lane)
        )
    if isinstance(values, PooledNames):
        names = values.head(k)
        return names if names.merged_with() is None else None
    used = list(values[:k])
    return used if len(set(used)) == k else None


def _keeps_codes(rank: np.ndarray) -> bool:
    """Whether first_use_order's rank leaves every used code as it is (rank[c] == c, or -1:
    not used): codes already numbered by first use (a table's keys in order), no gather."""
    used = np.flatnonzero(rank >= 0)
    return bool(np.array_equal(rank[used], used))


def _renumbered(events: np.ndarray, column: str, values, kernels: np.ndarray | None = None):
    """The values in first-use order, events[column] (and kernels' where given) renumbered
    to them in place: first_use_order's, with no pass over the rows where it would keep
    every code as it is."""
    kept = _first_use_kept(events[column], values)
    if kept is not None:
        return kept
    rank, values = first_use_order(events[column], values)
    if not _keeps_codes(rank):
        events[column] = rank[events[column]]
        if kernels is not None:
            kernels[column] = rank[kernels[column]]
    return values


def assemble(
    path,
    kind: str,
    events: np.ndarray,
    kernels: np.ndarray,
    names: list,
    tracks: list,
    categories: list,
    thread_names: dict | None = None,
    base_ns: int | None = None,
    offset_ns: int = 0,
    process_names: dict | None = None,
) -> HostTrace:
    """A HostTrace of EVENT and KERNEL rows whose codes index `names`, `tracks` and
    `categories`, each renumbered by first use in the events (every kernel is also an
    event, so its name is among them); `offset_ns` is added to every start."""
    names = _renumbered(events, "name", names, kernels)
    tracks = _renumbered(events, "track", tracks)
    categories = _renumbered(events, "category", categories)
    events["start_ns"] += offset_ns
    kernels["start_ns"] += offset_ns
    if np.any(kernels["start_ns"][1:] < kernels["start_ns"][:-1]):  # else already in order: no copy
        kernels = kernels[np.argsort(kernels["start_ns"], kind="stable")]
    # Text from the file, encodable however it is written (a JSON "\\ud800" is valid JSON)
    names, categories, tracks = _readable_keys(names), _readable_keys(categories), _readable_keys(tracks)
    thread_names = {_readable_key(k): _readable_key(v) for k, v in (thread_names or {}).items()}
    process_names = {_readable_key(k): _readable_key(v) for k, v in (process_names or {}).items()}

    def event(e) -> HostEvent:
        return HostEvent(
            tracks[e["track"]], names[e["name"]], int(e["start_ns"]), int(e["dur_ns"]), categories[e["category"]]
        )

    def kernel(k) -> HostKernel:
        return HostKernel(
            int(k["device"]),
            int(k["stream"]),
            names[k["name"]],
            tuple(k["grid"].tolist()),
            tuple(k["block"].tolist()),
            int(k["start_ns"]),
            int(k["dur_ns"]),
            int(k["correlation"]),
        )

    return HostTrace(
        readable(str(path)),
        kind,
        Rows(events, event),
        Rows(kernels, kernel),
        names,
        tracks,
        categories,
        thread_names,
        base_ns=base_ns,
        process_names=process_names,
    )


def _readable_keys(keys: list) -> list:
    """[_readable_key(k) for k in keys]: the same list where no text in it holds a
    surrogate (one search over them all, no call per key), else key by key."""
    if isinstance(keys, PooledNames):  # valid UTF-8 decoded: no surrogate
        return keys
    if isinstance(keys, TrackKeys):  # ints, and the reader's own kinds
        return keys if not _SURROGATE.search("".join(keys.kinds)) else [_readable_key(k) for k in keys]
    if set(map(type, keys)) <= {str}:  # names, categories: one join
        return list(keys) if not _SURROGATE.search("".join(keys)) else [_readable_key(k) for k in keys]
    flat = list(chain.from_iterable(k if isinstance(k, tuple) else (k,) for k in keys))
    if not any(isinstance(v, tuple) for v in flat):  # nested: key by key
        if not _SURROGATE.search("".join([v for v in flat if isinstance(v, str)])):
            return list(keys)
    return [_readable_key(k) for k in keys]


def _readable_key(key):
    if isinstance(key, tuple):
        return tuple(_readable_key(k) for k in key)
    return readable(key) if isinstance(key, str) else key


def check_time(start_ns: int, dur_ns: int, where: str) -> None:
    """A host event's REALTIME start and duration, in ns, as gpuobs can place them."""
    if not 0 <= start_ns < TIME_LIMIT_NS:
        raise HostTraceError(f"{where}: starts at {start_ns:,} ns on REALTIME, outside 0 .. 2^62 (1970 to 2116)")
    if dur_ns < 0:
        raise HostTraceError(f"{where}: negative duration {dur_ns:,} ns")
    if start_ns + dur_ns >= TIME_LIMIT_NS:
        raise HostTraceError(f"{where}: ends at {start_ns + dur_ns:,} ns on REALTIME, after 2^62 (2116)")
