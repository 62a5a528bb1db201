"""Values a recording may hold. A chunk's CRC says it is as written; these checks
say its values are ones a gpuobs tool can have written. Every field that later
sizes an array, indexes a table, or becomes a timestamp is checked against the
file's own tables (devices, SM counts) and the schema's limits when the file is
loaded, so a hostile or miswritten file fails there, naming the chunk, the row
and the field, instead of deep in an export with a MemoryError.

The checks read each checked column once (numpy reductions over the mapped file);
the block-overlap check sorts the block events once."""

from __future__ import annotations

import numpy as np

from . import schema
from .recording import UNFLUSHED

# From the schema: the tool hands out function slots from a table of this size.
FUNCTION_SLOTS = schema.constant("GPUOBS_FUNCTION_TABLE_SIZE")
# Not in the schema (facts about CUDA and clocks, kept next to the checks that use them):
MAX_DEVICES = 1024  # CUDA ordinals of one process
SM_ID_LIMIT = 1024  # %smid < %nsmid; no GPU has 1,024 SMs
SM_ID_HEADROOM = 2  # %smid may skip disabled SMs: allow ids below twice a device's SM count
TIME_LIMIT_NS = 1 << 62  # device and host clocks in ns: the year 2116 on the Unix epoch
COUNT_LIMIT = 1 << 63  # counters and ids read as signed 64-bit downstream
GRID_LIMITS = (2**31 - 1, 65535, 65535)  # CUDA's gridDim limits (x, y, z)
BLOCK_LIMITS = (1024, 1024, 64)  # CUDA's blockDim limits (x, y, z)
THREADS_PER_BLOCK = 1024
MAX_BLOCK_OVERLAP = 1024  # blocks open at once on one SM (hardware keeps at most 32 resident)
MAX_API_DEPTH = 256  # nested CUDA API calls on one thread (a runtime call and its driver calls)
EVENT_KINDS = tuple(int(k) for k in schema.EventKind)
CLOCK_BRACKETS = ("monotonic", "boottime", "realtime")
FLUSH_COUNTERS = (
    "attempted",
    "recorded",
    "dropped",
    "filtered",
    "unattributed",
    "unmatched_exit_threads",
    "unconfirmed_ends",
    "unrecorded_launches",
)


class BadValue(Exception):
    """A value no gpuobs tool writes: in `row` of the checked part, a `what` (None:
    in a chunk's own struct)."""

    def __init__(self, message: str, row: int | None = None, what: str = ""):
        super().__init__(message)
        self.row = row
        self.what = what


def _first(bad: np.ndarray) -> int | None:
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else None


def _below(part: np.ndarray, field: str, limit, why: str, what: str) -> None:
    """Every part[field] < limit (limit: a number, or an array aligned with part)."""
    values = part[field]
    if len(values) == 0:
        return
    if np.ndim(limit) == 0 and int(values.max()) < limit:
        return
    row = _first(values >= limit)
    if row is not None:
        bound = limit if np.ndim(limit) == 0 else int(limit[row])
        raise BadValue(f"{field} {int(values[row])} is not below {bound:,} ({why})", row, what)


def _device(index: int) -> None:
    if index >= MAX_DEVICES:
        raise BadValue(f"device_index {index} is not below {MAX_DEVICES} (CUDA ordinals of one process)")


def _seq(seq: int) -> None:
    if seq == UNFLUSHED:
        raise BadValue(f"flush_seq {seq:#x} is reserved (it marks launches after the last flush)")


def sm_limits(devices: np.ndarray) -> dict:
    """Per device index: the bound its events' SM ids must stay below."""
    limits = {}
    for d in devices:
        count = int(d["sm_count"])
        if count:
            limits[int(d["device_index"])] = min(SM_ID_LIMIT, max(count * SM_ID_HEADROOM, count + 1))
    return limits


# -- one-struct chunks, checked as they are read --------------------------------------


def check_device(info: np.void) -> None:
    _device(int(info["device_index"]))
    if int(info["sm_count"]) > SM_ID_LIMIT:
        raise BadValue(f"sm_count {int(info['sm_count'])} is above {SM_ID_LIMIT} (no GPU has that many SMs)")


def check_function(info: np.void) -> None:
    _device(int(info["device_index"]))
    slot = int(info["function_slot"])
    if slot >= FUNCTION_SLOTS:
        raise BadValue(f"function_slot {slot} is outside the tool's {FUNCTION_SLOTS}-slot function table")


def check_module(info: np.void) -> None:
    _device(int(info["device_index"]))


def check_flush(info: np.void, counts: np.ndarray) -> None:
    _device(int(info["device_index"]))
    _seq(int(info["flush_seq"]))
    for name in FLUSH_COUNTERS:
        if int(info[name]) >= COUNT_LIMIT:
            raise BadValue(f"{name} {int(info[name])} is not below 2^63")
    attempted, recorded, dropped = (int(info[k]) for k in ("attempted", "recorded", "dropped"))
    if recorded + dropped != attempted:
        raise BadValue(
            f"attempted {attempted:,} is not recorded {recorded:,} + dropped {dropped:,} "
            "(every claim is either recorded or dropped)"
        )
    if int(info["host_time_ns"]) >= TIME_LIMIT_NS:
        raise BadValue(f"host_time_ns {int(info['host_time_ns'])} is not below 2^62")
    try:
        _below(counts, "count", COUNT_LIMIT, "counts are read as signed 64-bit", "launch count")
    except BadValue as bad:
        raise BadValue(f"launch count {bad.row}: {bad}") from None


SLOTS_COUNTERS = ("warp_arrivals", "warp_arrivals_dropped", "unmatched_arrivals")


def _window_counters(info: np.void, names: tuple) -> None:
    """A per-flush record's device, flush number and counters (read as signed 64-bit)."""
    _device(int(info["device_index"]))
    _seq(int(info["flush_seq"]))
    for name in names:
        if int(info[name]) >= COUNT_LIMIT:
            raise BadValue(f"{name} {int(info[name])} is not below 2^63")


def check_slots(info: np.void) -> None:
    _window_counters(info, SLOTS_COUNTERS)
    arrivals, dropped = int(info["warp_arrivals"]), int(info["warp_arrivals_dropped"])
    if dropped > arrivals:
        raise BadValue(f"warp_arrivals_dropped {dropped:,} is above warp_arrivals {arrivals:,} (drops are of attempts)")
    if int(info["device_quiet_ns"]) >= TIME_LIMIT_NS:
        raise BadValue(f"device_quiet_ns {int(info['device_quiet_ns'])} is not below 2^62")


SAMPLING_COUNTERS = ("sampled_out", "budget_bytes_per_s", "burst_bytes", "gate_closed_ns")


def check_sampling(info: np.void) -> None:
    _window_counters(info, SAMPLING_COUNTERS)
    on, period = int(info["duty_on_ns"]), int(info["duty_period_ns"])
    if period >= TIME_LIMIT_NS or on > period:
        raise BadValue(f"duty cycle {on} ns of every {period} ns is not a duty cycle (ON at most PERIOD, below 2^62)")
    # The device keeps its duty cycle as two shifts of its clock (the schema's duty bits).
    on_device = int(info["flags"]) & schema.SamplingFlag.DUTY_ON_DEVICE
    if on_device and not (_power_of_two(on) and _power_of_two(period) and on < period):
        raise BadValue(
            f"a duty cycle on the device's clock of {on} ns of every {period} ns: the device keeps powers of two "
            "of ns, ON below PERIOD"
        )


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def check_events_header(device_index: int, flush_seq: int) -> None:
    _device(device_index)
    _seq(flush_seq)


# -- arrays, checked once every chunk is read ----------------------------------------


def check_launches(part: np.ndarray) -> None:
    what = "launch"
    _below(part, "device_index", MAX_DEVICES, "CUDA ordinals of one process", what)
    _below(part, "function_slot", FUNCTION_SLOTS, f"the tool's function table has {FUNCTION_SLOTS} slots", what)
    _below(part, "launch_id", COUNT_LIMIT, "ids are read as signed 64-bit", what)
    _below(part, "host_begin_ns", TIME_LIMIT_NS, "2^62 ns: the year 2116", what)
    for field, limits in (("grid", GRID_LIMITS), ("block", BLOCK_LIMITS)):
        dims = part[field]
        over = dims > np.asarray(limits, np.uint32)
        row = _first(over.any(axis=1)) if over.any() else None  # (a reduction along rows of 3 is slow)
        if row is not None:
            axis = int(np.argmax(dims[row] > np.asarray(limits)))
            raise BadValue(
                f"{field} {_dims(dims[row])}: {field}Dim.{'xyz'[axis]} {int(dims[row][axis])} is above "
                f"CUDA's limit {limits[axis]:,}",
                row,
                what,
            )
    block = part["block"].astype(np.int64)
    threads = block[:, 0] * block[:, 1] * block[:, 2]  # (below 2^36 once the limits hold)
    row = _first(threads > THREADS_PER_BLOCK)
    if row is not None:
        raise BadValue(
            f"block {_dims(part['block'][row])} has {int(threads[row]):,} threads, above CUDA's {THREADS_PER_BLOCK}",
            row,
            what,
        )


def check_events(part: np.ndarray, sm_limit: int) -> None:
    what = "event"
    kinds = part["kind"]
    if len(kinds) and int(kinds.max()) > max(EVENT_KINDS):
        row = _first(~np.isin(kinds, EVENT_KINDS))
        raise BadValue(f"kind {int(kinds[row])} is not an event kind (0 empty, 1 block, 2 memory access)", row, what)
    _below(part, "function_slot", FUNCTION_SLOTS, f"the tool's function table has {FUNCTION_SLOTS} slots", what)
    for field in ("sm_id", "sm_id_end"):
        _below(part, field, sm_limit, "its device's SM ids", what)
    for field in ("time_start", "time_end"):
        _below(part, field, TIME_LIMIT_NS, "2^62 ns: the year 2116", what)


def check_clock_samples(part: np.ndarray) -> None:
    what = "clock sample"
    _below(part, "device_index", MAX_DEVICES, "CUDA ordinals of one process", what)
    _below(part, "device_ns", TIME_LIMIT_NS, "2^62 ns: the year 2116", what)
    for clock in CLOCK_BRACKETS:
        before, after = part[f"{clock}_before"], part[f"{clock}_after"]
        _below(part, f"{clock}_after", TIME_LIMIT_NS, "2^62 ns: the year 2116", what)
        row = _first(after < before)
        if row is not None:
            raise BadValue(
                f"{clock}_after {int(after[row])} is before {clock}_before {int(before[row])} (an inverted bracket)",
                row,
                what,
            )


def check_api_calls(part: np.ndarray) -> None:
    what = "API call"
    _below(part, "exit_ns", TIME_LIMIT_NS, "2^62 ns: the year 2116", what)
    _below(part, "depth", MAX_API_DEPTH, "nesting of CUDA API calls on one thread", what)
    row = _first(part["exit_ns"] < part["enter_ns"])
    if row is not None:
        raise BadValue(
            f"exit_ns {int(part['exit_ns'][row])} is before enter_ns {int(part['enter_ns'][row])}", row, what
        )


def _dims(row) -> str:
    return "x".join(str(int(v)) for v in row)


# -- across chunks ----------------------------------------------------------------------

TIME_BITS = 44  # a packed sort key: the (device, SM) group above the time from the first start


SPAN_ROWS = 1 << 20  # events read at a time: the temporaries of one slice stay small


def block_span(part: np.ndarray) -> tuple:
    """(rows, start, end) of the block events of `part`: a block whose end a later replay
    may have stamped (flagged), or whose end is missing, counts from its start alone."""
    rows = np.flatnonzero(part["kind"] == schema.EventKind.BLOCK)
    start = part["time_start"][rows].astype(np.int64)
    end = np.maximum(part["time_end"][rows].astype(np.int64), start)
    late = (part["flags"][rows] & schema.BLOCK_END_UNCONFIRMED) != 0
    end[late] = start[late]
    return rows, start, end


def overlap_group(device: int, sm_ids: np.ndarray) -> np.ndarray:
    """The (device, SM) group deepest_block_overlap measures depths in."""
    return sm_ids.astype(np.int32) + np.int32(device * SM_ID_LIMIT)


def _block_spans(chunks: list, devices: list, only=None):
    """(chunk, rows, (device, SM) group, start, end) of block events, a slice of a
    chunk at a time (block_span); `only`: of these groups alone (sorted)."""
    for c, (chunk, device) in enumerate(zip(chunks, devices)):
        for lo in range(0, len(chunk), SPAN_ROWS):
            part = chunk[lo : lo + SPAN_ROWS]
            rows, start, end = block_span(part)
            if len(rows) == 0:
                continue
            group = overlap_group(device, part["sm_id"][rows])
            if only is not None:
                keep = np.isin(group, only)
                rows, group, start, end = rows[keep], group[keep], start[keep], end[keep]
                if len(rows) == 0:
                    continue
            yield c, rows + lo, group, start, end


OVERLAP_BATCH = 1 << 22  # block events sorted at once by deepest_block_overlap (~50 bytes each)


def deepest_block_overlap(chunks: list, devices: list, only=None) -> tuple[int, int, int]:
    """(most block events open at once on one SM of one device, and the chunk and row
    of an event that opens that many) over event chunks and their device indexes;
    blocks that touch do not overlap. One sorted key per start and one per end: the
    depth at a start is the group's starts so far minus its ends so far.

    Depths are per (device, SM) group, so a large recording is measured a range of
    whole groups at a time (at most OVERLAP_BATCH events each, one more pass over the
    events per range): what is held stays bounded, and the answer is the same.
    `only`: the groups to measure (sorted); None: all."""
    if sum(len(c) for c in chunks) <= OVERLAP_BATCH:
        ranges = [None]
    else:
        counts = np.zeros(0, np.int64)
        for _, _, g, _, _ in _block_spans(chunks, devices, only):
            part = np.bincount(g)
            counts = np.pad(counts, (0, max(len(part) - len(counts), 0)))
            counts[: len(part)] += part
        ranges, lo, held = [], 0, 0
        for g, n in enumerate(counts.tolist()):
            if held and held + n > OVERLAP_BATCH:
                ranges.append((lo, g))
                lo, held = g, 0
            held += n
        ranges.append((lo, len(counts)))
    best = (0, None, None)
    for groups in ranges:
        found = _deepest_in(chunks, devices, groups, only)
        if found is not None and found[0] > best[0]:  # the first deepest point in (group, time) order
            best = found
    depth, g, t = best
    if g is None:
        return 0, -1, -1
    for c, rows, groups, starts, _ in _block_spans(chunks, devices, only):  # the event that opens the deepest point
        hit = np.flatnonzero((groups == g) & (starts == t))
        if len(hit):
            return depth, c, int(rows[hit[0]])
    raise AssertionError("the deepest point's block was not found")


def _deepest_in(chunks: list, devices: list, groups, only=None):
    """(depth, group, start) of the deepest point among the blocks of groups lo <= g < hi
    (`groups` = (lo, hi); None: all), or None without blocks there."""
    parts = []
    for _, _, g, st, en in _block_spans(chunks, devices, only):
        if groups is not None:
            keep = (g >= groups[0]) & (g < groups[1])
            g, st, en = g[keep], st[keep], en[keep]
        if len(g):
            parts.append((g, st, en))
    if not parts:
        return None
    group, start, end = (column[0] if len(parts) == 1 else np.concatenate(column) for column in zip(*parts))
    del parts
    base = int(start.min())
    if int(end.max()) - base < 1 << TIME_BITS:
        s_key = group.astype(np.uint64) << np.uint64(TIME_BITS)
        e_key = s_key.copy()
        s_key |= (start - base).astype(np.uint64)
        e_key |= (end - base).astype(np.uint64)
        s_key.sort()
        e_key.sort()
        group_of = s_key & ~np.uint64((1 << TIME_BITS) - 1)
    else:  # spans over 4.9 hours: (group, time) pairs as structured keys
        pair = np.dtype([("g", "<i8"), ("t", "<i8")])
        s_key, e_key = np.zeros(len(group), pair), np.zeros(len(group), pair)
        s_key["g"], s_key["t"], e_key["g"], e_key["t"] = group, start, group, end
        s_key.sort()
        e_key.sort()
        group_of = np.zeros(len(group), pair)
        group_of["g"], group_of["t"] = s_key["g"], np.iinfo(np.int64).min
    del group, start, end
    depth = np.arange(1, len(s_key) + 1)  # starts so far ...
    depth -= np.searchsorted(s_key, group_of, side="left")  # ... of this group
    depth -= np.searchsorted(e_key, s_key, side="right")  # less its ends so far
    depth += np.searchsorted(e_key, group_of, side="left")
    at = int(np.argmax(depth))
    if s_key.dtype.names:
        g, t = int(s_key["g"][at]), int(s_key["t"][at])
    else:
        g, t = int(s_key[at]) >> TIME_BITS, base + (int(s_key[at]) & ((1 << TIME_BITS) - 1))
    return int(depth[at]), g, t
