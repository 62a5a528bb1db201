"""Synthetic recordings shaped like real ones, for tests, fixtures and benchmarks.

Blocks are laid on SMs the way the hardware does it: round-robin over SMs, a few
resident blocks per SM at once, waves one after another, with jittered durations."""

from __future__ import annotations

import numpy as np

from . import schema
from .recording_writer import RecordingWriter

GLOBALTIMER_BASE = 1_732_000_000_000_000_000  # a plausible %globaltimer value (ns)
UPTIME_NS = 5_000 * 10**9  # host CLOCK_MONOTONIC at GLOBALTIMER_BASE


def block_trace_events(
    n_launches: int,
    blocks_per_launch: int,
    sm_count: int = 132,
    resident: int = 4,
    seed: int = 0,
    gap_ns: int = 5_000,
    first_grid_id: int = 1000,
):
    """Events and launches for `n_launches` launches of `blocks_per_launch` blocks each."""
    rng = np.random.default_rng(seed)
    n = n_launches * blocks_per_launch
    ev = np.zeros(n, schema.EVENT_DTYPE)
    launches = np.zeros(n_launches, schema.dtype("gpuobs_launch"))
    t = GLOBALTIMER_BASE
    for k in range(n_launches):
        sl = slice(k * blocks_per_launch, (k + 1) * blocks_per_launch)
        i = np.arange(blocks_per_launch)
        wave = i // (sm_count * resident)
        mean = 2_000 + 500 * (k % 3)
        dur = rng.integers(mean // 2, mean * 2, blocks_per_launch)
        start = t + wave * (2 * mean) + rng.integers(0, 300, blocks_per_launch)
        ev["time_start"][sl] = start
        ev["time_end"][sl] = start + dur
        ev["grid_id"][sl] = first_grid_id + k
        ev["function_slot"][sl] = k % 3
        ev["block_x"][sl] = i
        ev["sm_id"][sl] = i % sm_count
        ev["sm_id_end"][sl] = i % sm_count
        ev["kind"][sl] = schema.EventKind.BLOCK
        launches[k]["launch_id"] = k + 1
        launches[k]["grid_id"] = first_grid_id + k
        launches[k]["function_slot"] = k % 3
        launches[k]["grid"] = (blocks_per_launch, 1, 1)
        launches[k]["block"] = (128, 1, 1)
        launches[k]["stream_id"] = 7
        launches[k]["host_begin_ns"] = 10_000_000 + k * 50_000
        t = int(ev["time_end"][sl].max()) + gap_ns
    # The device writes per-SM stripes, so records arrive grouped by SM, not by launch.
    order = np.lexsort((ev["time_start"], ev["sm_id"]))
    return ev[order], launches


FUNCTION_NAMES = [
    (
        "_Z13silu_and_mulIN3c108BFloat16EEvPT_PKS2_i",
        "void silu_and_mul<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, int)",
    ),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", ""),
    ("_Z15rms_norm_kernelPfPKfS1_fii", "rms_norm_kernel(float*, float const*, float const*, float, int, int)"),
]


def write_block_trace_recording(
    path,
    n_launches: int = 12,
    blocks_per_launch: int = 1024,
    sm_count: int = 132,
    seed: int = 0,
    dropped: int = 0,
    clock_offset_ns: int | None = 568_000,
    device_name: str = "NVIDIA H200",
    unrecorded_launches: int = 0,
    edit_events=None,
):
    """A complete block_trace recording; clock samples bracket the device clock when
    clock_offset_ns is given (device = host + offset, within a few microseconds).
    edit_events(events), when given, changes the events in place before they are written."""
    ev, launches = block_trace_events(n_launches, blocks_per_launch, sm_count, seed=seed)
    if edit_events is not None:
        edit_events(ev)
    if dropped:
        ev = ev[: len(ev) - dropped]
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 20, argv=["python3", "decode.py"])
        w.device(name=device_name, sm_count=sm_count)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.launches(launches)
        if clock_offset_ns is not None:
            w.clock_samples(_clock_samples(ev, clock_offset_ns))
        counts = whole_launch_counts(launches, blocks_per_launch)
        w.flush(
            attempted=len(ev) + dropped,
            recorded=len(ev),
            dropped=dropped,
            launch_counts=counts,
            unrecorded_launches=unrecorded_launches,
        )
        w.events(ev)
        w.end(flushes=1, launches=n_launches, events=len(ev))
    return path


def _write_serving_window(path, listed, counts, ev, sampling: dict, unrecorded_launches: int = 0):
    """One flush window of a block_trace serving run: the launches it lists with their
    counts, its records, and the SAMPLING chunk that says what the sampler did."""
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 20, argv=["python3", "serve.py"])
        w.device(name="NVIDIA H200", sm_count=132)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.launches(listed)
        w.flush(
            attempted=len(ev),
            recorded=len(ev),
            dropped=0,
            launch_counts=counts,
            unrecorded_launches=unrecorded_launches,
        )
        w.sampling(**sampling)
        w.events(ev)
        w.end(flushes=1, launches=len(listed), events=len(ev))
    return path


def write_sampled_recording(
    path, n_launches: int = 12, blocks_per_launch: int = 1024, open_launches=(0, 1, 2, 9), partial_launch=None
):
    """A block_trace recording whose sampler kept records only of `open_launches`
    (the sample gate open while they ran): every launch counted whole, the others'
    blocks sampled out, and SAMPLING chunks that say so (a 16 MB/s budget). Of
    `partial_launch` (one of them) only the first half of its blocks is kept, as if
    the gate closed while it ran."""
    ev, launches = block_trace_events(n_launches, blocks_per_launch, 132)
    keep = np.isin(ev["grid_id"], launches["grid_id"][list(open_launches)])
    if partial_launch is not None:
        keep &= ~((ev["grid_id"] == launches["grid_id"][partial_launch]) & (ev["block_x"] >= blocks_per_launch // 2))
    ev = ev[keep]
    sampling = dict(
        sampled_out=n_launches * blocks_per_launch - len(ev),
        budget_bytes_per_s=16_000_000,
        burst_bytes=256 << 20,
        gate_closed_ns=750_000_000,
        gate_turns=2,
    )
    return _write_serving_window(path, launches, whole_launch_counts(launches, blocks_per_launch), ev, sampling)


def write_duty_recording(
    path,
    n_launches: int = 12,
    blocks_per_launch: int = 1024,
    on_launches=(0, 1, 2, 9),
    budget_sampled_out: int = 0,
    listed_off=(),
):
    """A block_trace recording under a duty cycle kept on the device's clock (67.1 ms of
    every 4.29 s): only `on_launches` ran in an on time, listed and counted whole; the
    others ran in the off time, counted nothing, and were settled as unrecorded. With
    `budget_sampled_out`, a 16 MB/s budget also sampled that many of the on time's blocks
    out (those records are taken away, their counts kept). `listed_off`: off-time launches
    left listed with no block (as graph replays sharing a slot with an on-time one are)."""
    ev, launches = block_trace_events(n_launches, blocks_per_launch, 132)
    on = launches["grid_id"][list(on_launches)]
    ev = ev[np.isin(ev["grid_id"], on)][budget_sampled_out:]
    listed = launches[np.isin(launches["grid_id"], on)]
    kept_off = launches[list(listed_off)]
    sampling = dict(
        sampled_out=budget_sampled_out,
        budget_bytes_per_s=16_000_000 if budget_sampled_out else 0,
        burst_bytes=256 << 20 if budget_sampled_out else 0,
        duty_on_ns=1 << 26,
        duty_period_ns=1 << 32,
        flags=schema.SamplingFlag.DUTY_ON_DEVICE,
    )
    return _write_serving_window(
        path,
        np.concatenate([listed, kept_off]),
        whole_launch_counts(listed, blocks_per_launch),
        ev,
        sampling,
        unrecorded_launches=n_launches - len(listed) - len(kept_off),
    )


def whole_launch_counts(launches: np.ndarray, blocks_per_launch: int) -> np.ndarray:
    """A FLUSH chunk's launch counts: each launch counted whole, alone in its slot."""
    counts = np.zeros(len(launches), schema.dtype("gpuobs_launch_count"))
    counts["grid_id"] = launches["grid_id"]
    counts["count"] = blocks_per_launch
    counts["launches_sharing"] = 1
    return counts


def _clock_samples(ev: np.ndarray, offset_ns: int) -> np.ndarray:
    return _clock_samples_between(int(ev["time_start"].min()), int(ev["time_end"].max()), offset_ns)


def write_many_flush_recording(
    path, flushes: int, launches_per_flush: int = 2, blocks_per_launch: int = 2, sm_count: int = 132
):
    """A long run's shape: a flush at every quiet synchronisation, each window a few
    small launches (the soak's 12,000 flushes are about 4 MB). Every flush writes
    LAUNCHES, FLUSH and EVENTS, as the tool does."""
    launch_dt = schema.dtype("gpuobs_launch")
    per_flush = launches_per_flush * blocks_per_launch
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 20, argv=["python3", "soak.py"])
        w.device(sm_count=sm_count)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        for seq in range(flushes):
            first = seq * launches_per_flush
            launches = np.zeros(launches_per_flush, launch_dt)
            launches["launch_id"] = np.arange(first, first + launches_per_flush) + 1
            launches["grid_id"] = launches["launch_id"] + 1000
            launches["function_slot"] = np.arange(launches_per_flush) % len(FUNCTION_NAMES)
            launches["grid"] = (blocks_per_launch, 1, 1)
            launches["block"] = (128, 1, 1)
            launches["host_begin_ns"] = UPTIME_NS + seq * 1_000_000
            ev = np.zeros(per_flush, schema.EVENT_DTYPE)
            block = np.arange(per_flush) % blocks_per_launch
            ev["time_start"] = GLOBALTIMER_BASE + seq * 1_000_000 + np.arange(per_flush) * 3_000
            ev["time_end"] = ev["time_start"] + 2_000
            ev["grid_id"] = np.repeat(launches["grid_id"], blocks_per_launch)
            ev["function_slot"] = np.repeat(launches["function_slot"], blocks_per_launch)
            ev["block_x"] = block
            ev["sm_id"] = ev["sm_id_end"] = block % sm_count
            ev["thread_index"] = ev["exit_count"] = 128
            ev["kind"] = schema.EventKind.BLOCK
            w.launches(launches)
            w.flush(
                flush_seq=seq,
                attempted=per_flush,
                recorded=per_flush,
                dropped=0,
                host_time_ns=UPTIME_NS + seq * 1_000_000 + 500_000,
            )
            w.events(ev, flush_seq=seq)
        w.end(flushes=flushes, launches=flushes * launches_per_flush, events=flushes * per_flush)
    return path


BLOCK_STARTS_STREAMS = (0x10, 0x20, 0x30)
TRUE_END_ROW = np.dtype(
    [("device_index", "<u4"), ("grid_id", "<u8"), ("block_x", "<u4"), ("time_start", "<u8"), ("time_end", "<u8")]
)


def block_starts_program(first_grid_id: int = 1000):
    """The launches of write_block_starts_recording, per device, and which phases end
    at a quiet point: four flush windows over three streams; full-occupancy and
    uneven kernels, back to back on a stream and overlapping across streams; a graph
    node between two plain launches; a launch that raced the second flush (on a
    stream of its own, listed in the third window); the last window not quiet."""
    from .scheduler_sim import SimLaunch

    a, b, c = BLOCK_STARTS_STREAMS
    node = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE
    launches = [
        # phase 0: two kernels back to back on a, one beside them on b
        SimLaunch(a, 0, blocks=320, threads=256, mean_ns=4_000, phase=0, listed_in=0),
        SimLaunch(b, 2, blocks=60, threads=512, mean_ns=9_000, phase=0, listed_in=0),
        SimLaunch(a, 1, blocks=256, threads=128, mean_ns=6_000, phase=0, listed_in=0),
        # phase 1: plain, graph node, plain on a; the raced launch on c
        SimLaunch(a, 0, blocks=240, threads=256, mean_ns=3_000, phase=1, listed_in=1),
        SimLaunch(a, 1, blocks=24, threads=384, mean_ns=5_000, phase=1, listed_in=1, flags=node, graph_launch_id=9),
        SimLaunch(a, 0, blocks=160, threads=256, mean_ns=3_000, phase=1, listed_in=1),
        SimLaunch(
            c, 2, blocks=16, threads=128, mean_ns=80_000, phase=1, listed_in=2, flags=schema.LaunchFlag.RACED_FLUSH
        ),
        # phase 2: one block per SM, then a wide one
        SimLaunch(b, 2, blocks=8, threads=1024, mean_ns=12_000, phase=2, listed_in=2),
        SimLaunch(b, 0, blocks=400, threads=64, mean_ns=2_000, phase=2, listed_in=2),
        # phase 3 (not quiet): both streams
        SimLaunch(a, 1, blocks=200, threads=256, mean_ns=5_000, phase=3, listed_in=3),
        SimLaunch(b, 0, blocks=200, threads=256, mean_ns=5_000, phase=3, listed_in=3),
        SimLaunch(a, 0, blocks=100, threads=256, mean_ns=5_000, phase=3, listed_in=3),
    ]
    return launches, [True, True, True, False]


def write_block_starts_recording(
    path, seed: int = 0, sm_count: int = 8, devices: int = 1, incomplete_every: int = 29, dropped_every: int = 97
):
    """A complete block_starts recording from a simulated scheduler (scheduler_sim):
    block events with their start, SM and warp-slot mask and no end, SLOTS chunks
    (quiet points, warp arrivals), and the program of block_starts_program on each
    of `devices` GPUs (each simulated on its own, from the same device time).
    Every `incomplete_every`-th block loses a warp's arrival (flagged
    GPUOBS_BLOCK_SLOTS_INCOMPLETE) and every `dropped_every`-th block record is
    dropped (counted, not written). Returns (path, true ends): one TRUE_END_ROW per
    block event written."""
    from .scheduler_sim import simulate

    rng = np.random.default_rng(seed)
    program, quiet = block_starts_program()
    launch_dt = schema.dtype("gpuobs_launch")
    incomplete_flag = schema.constant("GPUOBS_BLOCK_SLOTS_INCOMPLETE")
    truth = []
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_STARTS, capacity=1 << 20, argv=["python3", "train.py"])
        for device in range(devices):
            w.device(device_index=device, name="NVIDIA H200", sm_count=sm_count, context_id=device + 1)
            w.module(module_id=1, device_index=device)
            for slot, (mangled, demangled) in enumerate(FUNCTION_NAMES):
                w.function(function_slot=slot, mangled=mangled, demangled=demangled, device_index=device)
        launch_id = 0
        for device in range(devices):
            sim = simulate(program, quiet, sm_count, GLOBALTIMER_BASE, rng)
            launches = np.zeros(len(program), launch_dt)
            for i, p in enumerate(program):
                launch_id += 1
                launches[i]["launch_id"] = launch_id
                launches[i]["grid_id"] = 1000 + i
                launches[i]["stream_id"] = p.stream
                launches[i]["host_begin_ns"] = _enqueued(program, quiet, sim.quiet_ns, i)
                launches[i]["function_slot"] = p.function_slot
                launches[i]["device_index"] = device
                launches[i]["grid"] = (p.blocks, 1, 1)
                launches[i]["block"] = (p.threads, 1, 1)
                launches[i]["graph_launch_id"] = p.graph_launch_id
                launches[i]["flags"] = p.flags
            ev = np.zeros(len(sim.start), schema.EVENT_DTYPE)
            ev["time_start"] = sim.start
            ev["grid_id"] = launches["grid_id"][sim.launch]
            ev["address"] = sim.mask
            ev["function_slot"] = launches["function_slot"][sim.launch]
            ev["block_x"] = sim.block_x
            ev["thread_index"] = launches["block"][sim.launch, 0]
            ev["sm_id"] = ev["sm_id_end"] = sim.sm
            ev["kind"] = schema.EventKind.BLOCK
            warps = (ev["thread_index"].astype(np.int64) + 31) // 32
            lose = (np.arange(len(ev)) % incomplete_every == incomplete_every - 1) & (warps > 1)
            for k in np.flatnonzero(lose):  # a dropped arrival: one slot, never the leader's, goes missing
                bits = [b for b in range(64) if int(ev["address"][k]) >> b & 1]
                ev["address"][k] &= ~np.uint64(1 << int(rng.choice(bits[1:])))
                ev["flags"][k] |= incomplete_flag
            kept = np.arange(len(ev)) % dropped_every != dropped_every - 1
            w.clock_samples(_clock_samples_between(int(sim.start.min()), int(sim.end.max()), CLOCK_OFFSET_NS, device))
            phase = np.array([p.phase for p in program])[sim.launch]
            listed_in = np.array([p.listed_in for p in program])
            for seq in range(len(quiet)):
                listed = listed_in == seq
                mine = phase == seq
                window = mine & kept
                counts = np.zeros(int(listed.sum()), schema.dtype("gpuobs_launch_count"))
                counts["grid_id"] = launches["grid_id"][listed]
                counts["count"] = [p.blocks for p, here in zip(program, listed) if here]
                counts["launches_sharing"] = 1
                w.launches(launches[listed])
                dropped = int((mine & ~kept).sum())
                w.flush(
                    device_index=device,
                    flush_seq=seq,
                    attempted=int(mine.sum()),
                    recorded=int(window.sum()),
                    dropped=dropped,
                    launch_counts=counts,
                    host_time_ns=UPTIME_NS + (seq + 1) * 1_000_000,
                )
                w.slots(
                    device_index=device,
                    flush_seq=seq,
                    warp_arrivals=int((warps[mine] - 1).sum()),
                    warp_arrivals_dropped=int((lose & window).sum()),
                    unmatched_arrivals=int((warps[mine & ~kept] - 1).sum()),  # warps of dropped block records
                    device_quiet_ns=sim.quiet_ns[seq],
                )
                rows = np.flatnonzero(window)
                rows = rows[np.lexsort((ev["time_start"][rows], ev["sm_id"][rows]))]  # stripes are per SM
                w.events(ev[rows], device_index=device, flush_seq=seq)
                t = np.zeros(len(rows), TRUE_END_ROW)
                t["device_index"], t["grid_id"], t["block_x"] = device, ev["grid_id"][rows], ev["block_x"][rows]
                t["time_start"], t["time_end"] = ev["time_start"][rows], sim.end[rows]
                truth.append(t)
        total = sum(len(t) for t in truth)
        w.end(flushes=len(quiet) * devices, launches=launch_id, events=total)
    return path, np.concatenate(truth)


CLOCK_OFFSET_NS = 568_000  # device - host of the block_starts recordings' clock samples


def _host_ns(device_ns: int) -> int:
    """The host CLOCK_MONOTONIC of a device time, as _clock_samples_between relates them."""
    return device_ns - CLOCK_OFFSET_NS - GLOBALTIMER_BASE + UPTIME_NS


def _enqueued(program: list, quiet: list, quiet_ns: list, i: int) -> int:
    """When the host enqueued launch i of a simulated program (host ns): a phase's
    launches right after the previous phase's quiet point returned to the host (the
    program synchronised, then launched), the first phase's before the device began;
    a launch the host waited for (not_before_ns) then. In launch order, 10 ns apart."""
    p = program[i]
    begin = GLOBALTIMER_BASE - 50_000
    if p.phase > 0 and quiet[p.phase - 1]:
        begin = quiet_ns[p.phase - 1] + 5_000
    if p.not_before_ns:
        begin = max(begin, GLOBALTIMER_BASE + p.not_before_ns - 1_000)
    return _host_ns(begin) + i * 10


def _clock_samples_between(first_ns: int, last_ns: int, offset_ns: int, device_index: int = 0) -> np.ndarray:
    samples = np.zeros(2, schema.dtype("gpuobs_clock_sample"))
    for i, device_ns in enumerate((first_ns - 1000, last_ns + 1000)):
        host = device_ns - offset_ns
        samples[i]["device_index"] = device_index
        samples[i]["method"] = 1
        samples[i]["device_ns"] = device_ns
        mono = host - GLOBALTIMER_BASE + UPTIME_NS
        samples[i]["monotonic_before"], samples[i]["monotonic_after"] = mono - 9_000, mono + 11_000
        samples[i]["boottime_before"], samples[i]["boottime_after"] = mono + 2_000, mono + 22_000
        samples[i]["realtime_before"], samples[i]["realtime_after"] = host - 9_000, host + 11_000
    return samples


# One decode step of write_block_starts_wait_recording: (function slot, blocks, threads, mean ns); a
# wide kernel, one of a block per SM, and two small ones whose SMs the next step reuses late.
WAIT_STEP = ((0, 64, 256, 4_000), (1, 16, 512, 6_000), (2, 3, 256, 20_000), (0, 2, 128, 3_000))
PROGRAM_WAITED = 6  # gpuobs_notice_code GPUOBS_NOTICE_PROGRAM_WAITED


def write_block_starts_wait_recording(
    path,
    wait_ns: int = 3_060_000_000,
    steps: int = 6,
    graph: bool = True,
    clock: bool = True,
    block_trace: bool = False,
    sm_count: int = 16,
    seed: int = 0,
):
    """A decode loop on one stream whose launching thread the tool made wait mid-run
    (ring pressure): the first half of the steps is enqueued ahead (host ahead of the
    device), then the thread waits `wait_ns` from the device's start while the device
    drains its queue and idles, then the rest is enqueued. Two flush windows, neither
    at a quiet point (the first flushed during the wait), and a PROGRAM_WAITED notice.
    graph: each step is a graph replay (kernel nodes, no stream bounds); else plain
    launches. clock: write clock samples (without them only the flush rule can tell).
    block_trace: the same simulated blocks with their true ends, as block_trace
    records them. Returns (path, true ends) as write_block_starts_recording."""
    from .scheduler_sim import SimLaunch, simulate

    rng = np.random.default_rng(seed)
    node = schema.LaunchFlag.GRAPH_NODE if graph else 0
    program = []
    for step in range(steps):
        after = step >= steps // 2
        for slot, blocks, threads, mean in WAIT_STEP:
            program.append(
                SimLaunch(
                    0x10,
                    slot,
                    blocks=blocks,
                    threads=threads,
                    mean_ns=mean,
                    phase=int(after),
                    listed_in=int(after),
                    flags=node,
                    graph_launch_id=step + 1 if graph else 0,
                    not_before_ns=wait_ns if after else 0,
                )
            )
    quiet = [False, False]
    sim = simulate(program, quiet, sm_count, GLOBALTIMER_BASE, rng)
    launches = np.zeros(len(program), schema.dtype("gpuobs_launch"))
    for i, p in enumerate(program):
        launches[i]["launch_id"] = i + 1
        launches[i]["grid_id"] = 1000 + i
        launches[i]["stream_id"] = p.stream
        launches[i]["host_begin_ns"] = _enqueued(program, quiet, sim.quiet_ns, i)
        launches[i]["function_slot"] = p.function_slot
        launches[i]["grid"] = (p.blocks, 1, 1)
        launches[i]["block"] = (p.threads, 1, 1)
        launches[i]["graph_launch_id"] = p.graph_launch_id
        launches[i]["flags"] = p.flags
    ev = np.zeros(len(sim.start), schema.EVENT_DTYPE)
    ev["time_start"] = sim.start
    ev["grid_id"] = launches["grid_id"][sim.launch]
    ev["function_slot"] = launches["function_slot"][sim.launch]
    ev["block_x"] = sim.block_x
    ev["thread_index"] = launches["block"][sim.launch, 0]
    ev["sm_id"] = ev["sm_id_end"] = sim.sm
    ev["kind"] = schema.EventKind.BLOCK
    if block_trace:
        ev["time_end"] = sim.end
        ev["exit_count"] = ev["thread_index"]
    else:
        ev["address"] = sim.mask
    phase = np.array([p.phase for p in program])
    truth = []
    mode = schema.Mode.BLOCK_TRACE if block_trace else schema.Mode.BLOCK_STARTS
    with RecordingWriter(path) as w:
        w.run(pid=4343, mode=mode, capacity=1 << 12, argv=["python3", "decode_loop.py"])
        w.device(name="NVIDIA H200", sm_count=sm_count)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        if clock:
            w.clock_samples(_clock_samples_between(int(sim.start.min()), int(sim.end.max()), CLOCK_OFFSET_NS))
        for seq in range(2):
            listed = phase == seq
            mine = phase[sim.launch] == seq
            counts = np.zeros(int(listed.sum()), schema.dtype("gpuobs_launch_count"))
            counts["grid_id"] = launches["grid_id"][listed]
            counts["count"] = launches["grid"][listed, 0]
            counts["launches_sharing"] = 1
            w.launches(launches[listed])
            w.flush(
                flush_seq=seq,
                attempted=int(mine.sum()),
                recorded=int(mine.sum()),
                dropped=0,
                launch_counts=counts,
                host_time_ns=_host_ns(GLOBALTIMER_BASE + (seq + 1) * wait_ns // 2),
            )
            if not block_trace:
                warps = (ev["thread_index"][mine].astype(np.int64) + 31) // 32
                w.slots(flush_seq=seq, warp_arrivals=int((warps - 1).sum()), device_quiet_ns=0)
            rows = np.flatnonzero(mine)
            rows = rows[np.lexsort((ev["time_start"][rows], ev["sm_id"][rows]))]
            w.events(ev[rows], flush_seq=seq)
            t = np.zeros(len(rows), TRUE_END_ROW)
            t["grid_id"], t["block_x"] = ev["grid_id"][rows], ev["block_x"][rows]
            t["time_start"], t["time_end"] = ev["time_start"][rows], sim.end[rows]
            truth.append(t)
        w.notice(
            code=PROGRAM_WAITED,
            device_index=0,
            text=f"device 0: to make room in the rings, the program's launching threads have waited 1 times so far, "
            f"{wait_ns / 1e6:.1f} ms in all (0 of them for a stream synchronisation gpuobs made)",
        )
        w.end(flushes=2, launches=len(program), events=len(ev))
    return path, np.concatenate(truth)


def graph_replay_tables(replays: int, nodes: int = 565, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(launches, launch counts) of `replays` back-to-back replays of one CUDA graph of
    `nodes` kernel nodes, as the tool lists them from a learned node table: a decode
    loop's metadata (each node's kernel and shape fixed, ids counting up, host times
    a replay's launch plus a few microseconds)."""
    rng = np.random.default_rng(seed)
    n = replays * nodes
    node = np.tile(np.arange(nodes), replays)
    replay = np.repeat(np.arange(replays), nodes)
    launches = np.zeros(n, schema.dtype("gpuobs_launch"))
    launches["launch_id"] = np.arange(n) + 2 + replay  # each replay's own launch id comes first
    launches["grid_id"] = np.arange(n) + 1000
    launches["stream_id"] = 0x7F00AA001230
    grids = rng.choice([1, 8, 32, 132, 264, 1024], nodes)
    blocks = rng.choice([128, 256, 512], nodes)
    launches["function_slot"] = rng.integers(0, 40, nodes)[node]
    launches["grid"] = np.stack([grids[node], np.ones(n), np.ones(n)], axis=1)
    launches["block"] = np.stack([blocks[node], np.ones(n), np.ones(n)], axis=1)
    launches["host_begin_ns"] = UPTIME_NS + replay * 12_000_000 + rng.integers(0, 3_000, n)
    launches["graph_launch_id"] = 1 + replay * (nodes + 1)
    launches["flags"] = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE
    counts = np.zeros(n, schema.dtype("gpuobs_launch_count"))
    counts["grid_id"] = launches["grid_id"]
    counts["count"] = grids[node]
    counts["launches_sharing"] = 1
    return launches, counts


def write_graph_replay_recording(
    path, launches, counts, flushes: int, *, pack=True, dropped=0, events_per_flush=4, api_calls=None, notice=""
) -> int:
    """graph_replay_tables' launches and counts written as the tool writes a serving
    run: cut into `flushes` windows (launch rows, then the FLUSH with their counts,
    `dropped` of each window's blocks dropped, then a few block records), packed as the
    tool packs them; `api_calls` cycled through the windows ten at a time, `notice`
    written first where given. Returns the launches written (the rest of a window cut)."""
    per = len(launches) // flushes
    with RecordingWriter(path, pack=pack) as w:
        w.run(pid=4242, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 20, argv=["python3", "serve.py"])
        w.device(sm_count=132)
        w.module(module_id=1)
        for slot in range(int(launches["function_slot"].max()) + 1):
            w.function(function_slot=slot, mangled=f"_Z6kernelILi{slot}EEvv")
        if notice:
            w.notice(code=1, text=notice)
        for seq in range(flushes):
            rows = slice(seq * per, (seq + 1) * per)
            blocks = int(counts["count"][rows].sum())
            w.launches(launches[rows])
            if api_calls is not None:
                at = seq * 10 % len(api_calls)
                w.api_calls(api_calls[at : at + 10])
            w.flush(
                flush_seq=seq,
                attempted=blocks,
                recorded=blocks - dropped,
                dropped=dropped,
                host_time_ns=UPTIME_NS + seq * 80_000_000,
                launch_counts=counts[rows],
            )
            ev = np.zeros(events_per_flush, schema.EVENT_DTYPE)
            ev["kind"] = schema.EventKind.BLOCK
            w.events(ev, flush_seq=seq)
        w.end(flushes=flushes, launches=per * flushes, events=events_per_flush * flushes)
    return per * flushes
