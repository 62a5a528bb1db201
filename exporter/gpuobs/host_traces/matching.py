"""Match a separate run's kernels to gpuobs's launches, per device, by kernel
name, grid and block, in launch order (streams differ between runs, so they are
not part of the key). Gives the uninstrumented duration of each matched launch
next to the instrumented one: the per-kernel cost of instrumentation."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from ..analysis.launches import LaunchTable
from ..recording_file.recording import Recording
from .pooled_names import PooledNames

WINDOW_CELLS = 1 << 24  # kernel comparisons held at once while sliding one run along the other


@dataclass
class KernelMatch:
    launch_index: np.ndarray  # into rec.launches
    host_kernel: list  # HostKernel per match
    unmatched_launches: int = 0  # timed gpuobs launches with no partner
    unmatched_host: int = 0  # profiler kernels with no partner
    per_kernel: list = field(default_factory=list)  # rows: name, matched, host_us, gpuobs_us, ratio


def match_kernels(rec: Recording, table: LaunchTable, host) -> KernelMatch:
    timed = np.flatnonzero(table.first_start > 0)
    timed = timed[np.argsort(table.first_start[timed], kind="stable")]
    my_keys, their_keys = _key_codes(rec, table, timed, host)
    # The other run may cover only part of this one (a profiled window of steps,
    # after warm-up): slide its kernel sequence along ours and keep the offset
    # where the most kernels agree, then pair equal keys in order within it.
    lo, hi = _best_window(my_keys, their_keys)
    mine, partner = _pair_in_order(my_keys[lo:hi], their_keys)
    idx = timed[lo:hi][mine].tolist()
    partners = [host.kernels[int(j)] for j in partner]
    n_mine = len(timed)
    n_theirs = len(host.kernels)
    result = KernelMatch(np.array(idx, np.int64), partners, n_mine - len(idx), n_theirs - len(idx))
    by_name: dict = {}
    for i, k in zip(idx, partners):
        span = int(table.last_end[i]) - int(table.first_start[i])
        by_name.setdefault(table.name[i], []).append((k.dur_ns, span))
    for name, pairs in by_name.items():
        host_ns = statistics.median(p[0] for p in pairs)
        gpuobs_ns = statistics.median(p[1] for p in pairs)
        result.per_kernel.append(
            {
                "kernel": name,
                "matched": len(pairs),
                "uninstrumented_us": host_ns / 1e3,
                "instrumented_us": gpuobs_ns / 1e3,
                "ratio": gpuobs_ns / host_ns if host_ns else float("nan"),
            }
        )
    result.per_kernel.sort(key=lambda r: -r["matched"] * r["instrumented_us"])
    return result


def key_columns(rec: Recording, table: LaunchTable, timed: np.ndarray, host) -> list[tuple]:
    """The key's columns (device, kernel name, grid, block), each as (ours of the timed
    launches, the other run's kernels'). Names: ours numbered by first use, each of
    theirs given the number of the same name of ours, and every name only theirs one
    number past ours (a key only theirs pairs with nothing, whichever it is); a name
    index of -1 reads as our first name, as it always has."""
    names: dict = {}
    my_names = np.array([names.setdefault(table.name[i], len(names)) for i in timed.tolist()], np.int64)
    # looked up, not inserted: no dict entry per host name (a host trace may have a name per row)
    if isinstance(host.names, PooledNames):  # only the names that could be one of ours read
        their_name_codes = np.append(host.names.codes_in(names, len(names)), 0)
    else:
        theirs = list(map(names.get, host.names, repeat(len(names), len(host.names))))
        their_name_codes = np.array(theirs + [0], np.int64)
    k, launches = host.kernels, rec.launches
    return [
        (launches["device_index"][timed], k["device"]),
        (my_names, their_name_codes[k["name"]]),
        *((launches["grid"][timed, i], k["grid"][:, i]) for i in range(3)),
        *((launches["block"][timed, i], k["block"][:, i]) for i in range(3)),
    ]


def _key_codes(rec: Recording, table: LaunchTable, timed: np.ndarray, host) -> tuple[np.ndarray, np.ndarray]:
    """One code per key (device, kernel name, grid, block), of our timed launches and
    of the other run's kernels: equal codes, equal keys."""
    k = host.kernels
    columns = key_columns(rec, table, timed, host)
    # A kernel of theirs whose name is none of ours (key_columns numbers those past ours)
    # pairs with nothing: all of them share one code of their own, found by no column
    # (what they pair with, and where the window falls, is only which codes are equal).
    my_names, their_names = columns[1]
    maybe = np.flatnonzero(their_names < (int(my_names.max()) + 1 if len(my_names) else 0))
    if len(maybe) < len(k):
        columns = [(mine, np.asarray(theirs)[maybe]) for mine, theirs in columns]
    # folded in a column at a time as digits of one number (each column's values
    # ranked), renumbered densely only where the next digit would not fit and at the
    # end: a few int64 per row held, not a key matrix. Ranks of ranks keep the order
    # of the keys, so the codes are those of renumbering after every column.
    code = np.zeros(len(timed) + len(maybe), np.int64)
    span = 1  # code < span
    for mine, theirs in columns:
        both = np.concatenate([np.asarray(mine, np.int64), np.asarray(theirs, np.int64)])
        if not len(both) or both.min() == both.max():
            continue  # one value (a device, a grid's y and z): no digit
        values, column = np.unique(both, return_inverse=True)
        if span * len(values) >= 1 << 62:
            code = np.unique(code, return_inverse=True)[1].reshape(-1)
            span = int(code.max()) + 1
        code *= len(values)
        code += column.reshape(-1)
        span *= len(values)
    code = np.unique(code, return_inverse=True)[1].reshape(-1)
    if len(maybe) == len(k):
        return code[: len(timed)], code[len(timed) :]
    theirs = np.full(len(k), int(code.max()) + 1 if len(code) else 0, np.int64)  # names only theirs: one code
    theirs[maybe] = code[len(timed) :]
    return code[: len(timed)], theirs


def _occurrence(codes: np.ndarray) -> np.ndarray:
    """Each element's count of equal codes before it."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    group_start = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    starts = np.repeat(group_start, np.diff(np.r_[group_start, len(codes)]))
    rank = np.empty(len(codes), np.int64)
    rank[order] = np.arange(len(codes)) - starts
    return rank


def _pair_in_order(mine: np.ndarray, theirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The n-th of ours with a key paired with the n-th of theirs with it: (our
    positions, their positions), keys in the order they first come in ours, each in order."""
    if not len(mine) or not len(theirs):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    size = int(max(mine.max(), theirs.max())) + 1
    my_rank = _occurrence(mine)
    their_order = np.argsort(theirs, kind="stable")
    their_count = np.bincount(theirs, minlength=size)
    their_start = np.r_[0, np.cumsum(their_count)[:-1]]
    paired = np.flatnonzero(my_rank < their_count[mine])
    first_seen = np.full(size, len(mine), np.int64)
    np.minimum.at(first_seen, mine, np.arange(len(mine)))
    paired = paired[np.lexsort((my_rank[paired], first_seen[mine[paired]]))]
    return paired, their_order[their_start[mine[paired]] + my_rank[paired]]


def _best_window(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """[lo, hi) of our key codes `a` that lines up best with theirs, `b` (same length where it fits)."""
    if not len(a) or not len(b) or len(b) >= len(a):
        return 0, len(a)
    m = len(b)
    windows = np.lib.stride_tricks.sliding_window_view(a, m)
    agree = np.empty(len(windows), np.int64)
    rows = max(1, WINDOW_CELLS // m)  # compared a block of offsets at a time: memory stays bounded
    for lo in range(0, len(windows), rows):
        agree[lo : lo + rows] = (windows[lo : lo + rows] == b).sum(axis=1)
    # Of equally good offsets the latest: a profiler is usually started after warm-up.
    best = len(agree) - 1 - int(np.argmax(agree[::-1]))
    return best, best + m


def kernel_alignment(rec: Recording, table: LaunchTable, match: KernelMatch, clock) -> tuple[int, int]:
    """--align kernels: the shift (ns) that lines the profiler's kernel starts up
    with gpuobs's, on the host REALTIME axis, and the median residual after it."""
    if not len(match.launch_index) or not clock.measured:
        return 0, 0
    offsets = []
    for i, k in zip(match.launch_index, match.host_kernel):
        # gpuobs's kernel start on REALTIME, through the measured device clock relation
        device_start = int(table.first_start[i])
        realtime = device_start - clock.realtime_offset_ns
        offsets.append(realtime - k.start_ns)
    shift = int(statistics.median(offsets))
    residual = int(statistics.median(abs(o - shift) for o in offsets))
    return shift, residual
