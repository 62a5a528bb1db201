"""A small simulated block scheduler, for synthetic block_starts recordings whose
true block ends are known.

Each SM has 64 hardware warp slots and holds at most 32 blocks. A block takes
ceil(threads / 32) free slots, drawn at random from the lowest free ones (a
block's warps need not take consecutive slots), and starts a dispatch latency after the moment it was placed,
so every slot it takes was free before it starts, as measured on an H200. Launches
on one stream run one after another; launches on different streams share the SMs.
Launches are grouped in phases (the flush windows): after a quiet phase the tool
synchronised every stream with launches listed in it and read the device clock
(the quiet point); the next phase's launches start after that."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

SLOTS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
SLOT_CHOICE_SPREAD = 8  # a block's slots are drawn from its warps + this many lowest free slots
DISPATCH_NS = (30, 300)  # from a block's placement to its leader's first instruction
STREAM_GAP_NS = (500, 3_000)  # from a kernel's last block end to the next kernel's eligibility
QUIET_NS = (1_000, 4_000)  # from the window's last block end to the quiet point's clock read
HOST_RESUME_NS = 25_000  # from a quiet point to the next phase's first eligibility: the host's sync
# returns, then it launches (a launch is enqueued by the host before its blocks can start)


@dataclass
class SimLaunch:
    stream: int
    function_slot: int
    blocks: int
    threads: int  # per block
    mean_ns: int  # mean block duration
    phase: int  # the flush window its events are written in
    listed_in: int  # the flush window that lists it (phase + 1 for a launch that raced the flush)
    flags: int = 0
    graph_launch_id: int = 0
    not_before_ns: int = 0  # from t0: the host enqueues it then (a wait of the launching thread), not earlier


@dataclass
class SimResult:
    """Per block (launch index, block x, SM, start, true end, slot mask), and per phase its quiet point (0: none)."""

    launch: np.ndarray
    block_x: np.ndarray
    sm: np.ndarray
    start: np.ndarray
    end: np.ndarray
    mask: np.ndarray
    quiet_ns: list


def simulate(launches: list, quiet: list, sm_count: int, t0: int, rng: np.random.Generator) -> SimResult:
    """Runs `launches` (in launch order) on `sm_count` SMs from device time `t0`;
    quiet[p]: phase p ends at a quiet point."""
    free = np.ones((sm_count, SLOTS_PER_SM), bool)
    resident = np.zeros(sm_count, np.int64)
    running: list = []  # heap of (end, block)
    rows: list = []  # (launch, x, sm, start, end, mask)
    left_to_end = [launch.blocks for launch in launches]
    launch_end = [0] * len(launches)
    next_x = [0] * len(launches)
    quiet_ns = [0] * len(quiet)
    streams = sorted({launch.stream for launch in launches})
    queue = {s: [i for i, launch in enumerate(launches) if launch.stream == s] for s in streams}
    active: list = []
    sm_turn = 0
    t = t0

    def eligible_at(i: int):
        """When launch i may start, or None while that depends on what has not ended."""
        launch = launches[i]
        before = [j for j in queue_all[launch.stream] if j < i]
        when = t0 + launch.not_before_ns
        if before:
            if left_to_end[before[-1]]:
                return None
            when = max(when, launch_end[before[-1]] + gaps[i])
        p = launch.phase - 1
        if p >= 0 and quiet[p]:
            if quiet_ns[p] == 0:
                return None
            when = max(when, quiet_ns[p] + HOST_RESUME_NS + gaps[i])
        return when

    queue_all = {s: list(q) for s, q in queue.items()}
    gaps = rng.integers(*STREAM_GAP_NS, len(launches))
    while any(queue.values()) or active or running:
        for s in streams:  # stream heads whose time has come
            if queue[s] and (when := eligible_at(queue[s][0])) is not None and when <= t:
                active.append(queue[s].pop(0))
        active.sort()
        for i in list(active):
            launch = launches[i]
            warps = (launch.threads + 31) // 32
            while next_x[i] < launch.blocks:
                fits = np.flatnonzero((free.sum(axis=1) >= warps) & (resident < MAX_BLOCKS_PER_SM))
                if len(fits) == 0:
                    break
                sm = int(fits[np.searchsorted(fits, sm_turn) % len(fits)])
                sm_turn = (sm + 1) % sm_count
                # mostly low slots, not in order: among the lowest few free ones
                slots = rng.choice(np.flatnonzero(free[sm])[: warps + SLOT_CHOICE_SPREAD], warps, replace=False)
                free[sm, slots] = False
                resident[sm] += 1
                start = t + int(rng.integers(*DISPATCH_NS))
                end = start + int(rng.integers(launch.mean_ns // 2, launch.mean_ns * 2))
                mask = int(np.bitwise_or.reduce(np.left_shift(np.uint64(1), slots.astype(np.uint64))))
                heapq.heappush(running, (end, len(rows)))
                rows.append((i, next_x[i], sm, start, end, mask))
                next_x[i] += 1
            if next_x[i] == launch.blocks:
                active.remove(i)
        # the next moment anything changes: a block ends, or a stream head becomes eligible
        times = [running[0][0]] if running else []
        times += [w for s in streams if queue[s] and (w := eligible_at(queue[s][0])) is not None and w > t]
        if not times:
            break
        t = min(times)
        while running and running[0][0] <= t:
            end, b = heapq.heappop(running)
            i, _x, sm, _start, _end, mask = rows[b]
            free[sm, [k for k in range(SLOTS_PER_SM) if mask >> k & 1]] = True
            resident[sm] -= 1
            left_to_end[i] -= 1
            launch_end[i] = max(launch_end[i], end)
            _close_quiet_phases(launches, quiet, quiet_ns, left_to_end, launch_end, rng)
    _close_quiet_phases(launches, quiet, quiet_ns, left_to_end, launch_end, rng)
    cols = list(zip(*rows)) if rows else [()] * 6
    return SimResult(
        launch=np.array(cols[0], np.int64),
        block_x=np.array(cols[1], np.uint32),
        sm=np.array(cols[2], np.uint16),
        start=np.array(cols[3], np.uint64),
        end=np.array(cols[4], np.uint64),
        mask=np.array(cols[5], np.uint64),
        quiet_ns=quiet_ns,
    )


def _close_quiet_phases(launches, quiet, quiet_ns, left_to_end, launch_end, rng) -> None:
    """A quiet phase's point, once every launch it lists has ended (in phase order:
    the tool synchronises one window after another)."""
    for p, is_quiet in enumerate(quiet):
        if not is_quiet or quiet_ns[p]:
            continue
        listed = [i for i, launch in enumerate(launches) if launch.listed_in == p]
        if any(left_to_end[i] for i in listed):
            return
        last = max([launch_end[i] for i in listed] + [q for q in quiet_ns[:p] if q], default=0)
        quiet_ns[p] = last + int(rng.integers(*QUIET_NS))
