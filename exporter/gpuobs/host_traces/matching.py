"""Match a separate run's kernels to gpuobs's launches, per device, by kernel
name, grid and block, in launch order (streams differ between runs, so they are
not part of the key). Gives the uninstrumented duration of each matched launch
next to the instrumented one: the per-kernel cost of instrumentation."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from ..analysis.launches import LaunchTable
from ..recording_file.recording import Recording

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

    def key_of(i):
        return (
            int(rec.launches["device_index"][i]),
            table.name[i],
            tuple(int(v) for v in rec.launches["grid"][i]),
            tuple(int(v) for v in rec.launches["block"][i]),
        )

    my_keys = [key_of(i) for i in timed]
    k = host.kernels  # in start order
    their_keys = list(
        zip(
            k["device"].tolist(),
            [host.names[i] for i in k["name"].tolist()],
            map(tuple, k["grid"].tolist()),
            map(tuple, k["block"].tolist()),
        )
    )
    # The other run may cover only part of this one (a profiled window of steps,
    # after warm-up): slide its kernel sequence along ours and keep the offset
    # where the most kernels agree, then pair equal keys in order within it.
    lo, hi = _best_window(my_keys, their_keys)
    mine: dict = {}
    for i, key in zip(timed[lo:hi], my_keys[lo:hi]):
        mine.setdefault(key, []).append(int(i))
    theirs: dict = {}
    for j, key in enumerate(their_keys):
        theirs.setdefault(key, []).append(j)
    idx, partners = [], []
    for key, launches in mine.items():
        others = theirs.get(key, [])
        for a, b in zip(launches, others):
            idx.append(a)
            partners.append(host.kernels[b])
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


def _best_window(mine: list, theirs: list) -> tuple[int, int]:
    """[lo, hi) of `mine` that lines up best with `theirs` (same length where it fits)."""
    if not mine or not theirs or len(theirs) >= len(mine):
        return 0, len(mine)
    codes = {}
    a = np.array([codes.setdefault(k, len(codes)) for k in mine], np.int64)
    b = np.array([codes.get(k, -1) for k in theirs], np.int64)
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
