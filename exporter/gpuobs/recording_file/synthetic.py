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
        counts = np.zeros(n_launches, schema.dtype("gpuobs_launch_count"))
        counts["grid_id"] = launches["grid_id"]
        counts["count"] = blocks_per_launch
        counts["launches_sharing"] = 1
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


def _clock_samples(ev: np.ndarray, offset_ns: int) -> np.ndarray:
    samples = np.zeros(2, schema.dtype("gpuobs_clock_sample"))
    for i, device_ns in enumerate((int(ev["time_start"].min()) - 1000, int(ev["time_end"].max()) + 1000)):
        host = device_ns - offset_ns
        samples[i]["method"] = 1
        samples[i]["device_ns"] = device_ns
        mono = host - GLOBALTIMER_BASE + UPTIME_NS
        samples[i]["monotonic_before"], samples[i]["monotonic_after"] = mono - 9_000, mono + 11_000
        samples[i]["boottime_before"], samples[i]["boottime_after"] = mono + 2_000, mono + 22_000
        samples[i]["realtime_before"], samples[i]["realtime_after"] = host - 9_000, host + 11_000
    return samples


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
