"""The Parquet tables' columns, one source for the writer and for the documented
schema (docs/parquet-schema.md lists exactly these; tests/test_parquet.py checks
that it does). A change of a column's name, type or meaning bumps SCHEMA_VERSION.

Each table is a list of (column, arrow type, meaning). Partition columns (pid,
gpu) live in the directory names (Hive style: `blocks/pid=4242/gpu=0/`), not in the
files, as Spark and DuckDB both expect."""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1
MANIFEST = "gpuobs-parquet.json"

u8, u16, u32, u64, i64, f64, s, b = (
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.int64(),
    pa.float64(),
    pa.string(),
    pa.bool_(),
)
dict_s = pa.dictionary(pa.int32(), pa.string())

# table -> (partitioned by GPU, columns)
TABLES: dict = {
    "recordings": (
        False,
        [
            ("path", s, "the .gpuobs file as it was named to the export"),
            ("mode", s, "off, block_counter, block_starts, block_trace, mem_sampled or mem_full"),
            ("sample_shift", u32, "memory modes: an access is sampled when the low sample_shift hash bits are 0"),
            ("tool_version", s, "the gpuobs tool that wrote the recording"),
            ("format_version", u32, "the .gpuobs format version"),
            ("start_realtime_ns", u64, "host CLOCK_REALTIME when recording started"),
            ("start_monotonic_ns", u64, "host CLOCK_MONOTONIC when recording started"),
            ("argv", s, "the recorded program's command line, space separated"),
            ("complete", b, "the run closed cleanly (an END chunk was written)"),
            ("damaged_at", i64, "read with --salvage: the byte where the kept part ends; null when whole"),
            ("selection", s, "what the export kept: --kernels, --launches, --time-window, or 'everything'"),
        ],
    ),
    "kernels": (
        True,
        [
            ("function_slot", u32, "the function's slot in its context (blocks.function_slot, launches.function_slot)"),
            ("module_id", u64, "the module that holds it"),
            ("kernel", s, "demangled name (the mangled one where demangling gave nothing)"),
            ("mangled", s, "mangled name"),
        ],
    ),
    "launches": (
        True,
        [
            ("launch_id", u64, "the tool's launch id, unique in the process"),
            ("kernel", dict_s, "kernel name (as kernels.kernel)"),
            ("function_slot", u32, "as kernels.function_slot"),
            ("grid_id", u64, "the sanitizer's grid id (events carry the device %gridid)"),
            ("stream_id", u64, "the CUDA stream handle"),
            ("host_begin_ns", u64, "host CLOCK_MONOTONIC at the launch callback"),
            ("grid_x", u32, "grid dimensions"),
            ("grid_y", u32, ""),
            ("grid_z", u32, ""),
            ("block_dim_x", u32, "block dimensions"),
            ("block_dim_y", u32, ""),
            ("block_dim_z", u32, ""),
            ("flags", u32, "gpuobs_launch_flags bits (schemas/gpuobs_schema.h)"),
            ("graph_replay", u32, "graph node launches: the replay's graph launch id; null otherwise"),
            ("graph_node", i64, "graph node launches: position of the kernel in its replay; null otherwise"),
            ("launched_from_device", b, "a grid launched by a kernel (dynamic parallelism)"),
            ("api_call_id", u64, "--api-trace: the CUDA API call that made it (api_calls.call_id); 0: none"),
            ("flush_seq", u32, "the flush window that lists it (flushes.flush_seq); 4294967295: none"),
            ("grid_blocks", i64, "blocks in the grid"),
            ("blocks_recorded", i64, "block records kept (< grid_blocks: some were dropped)"),
            ("memory_samples", i64, "memory samples kept"),
            ("counted", i64, "exact blocks (block modes) or accesses (memory modes) counted on the device; null: none"),
            ("count_shared_by", i64, "launches sharing that counter slot (1: the count is this launch's alone)"),
            ("first_start_ns", u64, "device clock: its first block's start; null without block records"),
            ("last_end_ns", u64, "device clock: its last block's end (block_starts: the latest upper bound)"),
            ("span_ns", i64, "last_end_ns - first_start_ns, what `gpuobs stats` sums; null without block records"),
            ("end_kind", s, "what last_end_ns is: measured; block_starts: slot, stream, quiet or none (a bound)"),
        ],
    ),
    "blocks": (
        True,
        [
            ("launch_id", u64, "as launches.launch_id; null: no launch of the recording claims it"),
            ("kernel", dict_s, "kernel name"),
            ("function_slot", u32, "as kernels.function_slot"),
            ("grid_id", u64, "device %gridid"),
            ("block_x", u32, "block index"),
            ("block_y", u16, ""),
            ("block_z", u16, ""),
            ("sm", u16, "%smid at the block's start"),
            ("start_ns", u64, "device clock (%globaltimer): the block's start"),
            ("end_ns", u64, "device clock: its end (end_kind says what it is)"),
            ("start_monotonic_ns", i64, "start_ns on host CLOCK_MONOTONIC, where the clock relation was measured"),
            ("end_monotonic_ns", i64, "end_ns on host CLOCK_MONOTONIC, where measured"),
            (
                "end_kind",
                dict_s,
                "measured; unconfirmed (a later replay may have stamped it); "
                "block_starts: slot, stream, quiet (upper bounds) or none (end_ns = start_ns)",
            ),
            ("threads", u16, "threads in the block"),
            ("exit_count", u16, "threads whose exit stamped the end"),
            ("flags", u16, "gpuobs_block_flags bits"),
            ("flush_seq", u32, "its flush window (flushes.flush_seq)"),
            ("graph_replay", u32, "graph node launches: the replay's graph launch id; null otherwise"),
            ("graph_node", i64, "graph node launches: the kernel's position in its replay; null otherwise"),
        ],
    ),
    "memory_samples": (
        True,
        [
            ("launch_id", u64, "as launches.launch_id; null: no launch claims it"),
            ("kernel", dict_s, "kernel name"),
            ("time_ns", u64, "device clock: when the access ran"),
            ("time_monotonic_ns", i64, "time_ns on host CLOCK_MONOTONIC, where measured"),
            ("sm", u16, "%smid"),
            ("address", u64, "generic address accessed"),
            ("pc", u64, "pc of the access"),
            ("access_size", u8, "bytes"),
            ("access_flags", u16, "the sanitizer's access flags"),
            ("thread", u16, "flat thread index in the block"),
            ("block_x", u32, "block index"),
            ("block_y", u16, ""),
            ("block_z", u16, ""),
            ("flush_seq", u32, "its flush window"),
        ],
    ),
    "flushes": (
        True,
        [
            ("flush_seq", u32, "the window's sequence number on its GPU"),
            ("index", u32, "the window's index as `gpuobs info` lists it and `trim --flushes` takes it"),
            ("host_time_ns", u64, "host CLOCK_MONOTONIC at the flush"),
            ("attempted", u64, "records the device tried to write"),
            ("recorded", u64, "records written"),
            ("dropped", u64, "records the device could not keep (buffer full)"),
            ("filtered", u64, "records left out by a filter"),
            ("unattributed", u64, "counts in counter slots no launch owned"),
            ("unmatched_exit_threads", u64, "thread exits that matched no block entry"),
            ("unconfirmed_ends", u64, "block ends a later replay may have stamped"),
            ("unrecorded_launches", u64, "launches outside recording windows (their kernels recorded nothing)"),
            ("incomplete", u32, "records not committed at the flush"),
            ("warp_arrivals", u64, "block_starts: warp arrivals recorded (0 in other modes)"),
            ("warp_arrivals_dropped", u64, "block_starts: warp arrivals dropped"),
            ("device_quiet_ns", u64, "block_starts: %globaltimer at a quiet flush; 0: not quiet"),
        ],
    ),
    "launch_counts": (
        True,
        [
            ("flush_seq", u32, "the flush window"),
            ("grid_id", u64, "the launch's grid id (launches.grid_id)"),
            ("count", u64, "exact blocks or accesses of its counter slot"),
            ("launches_sharing", u32, "launches sharing the slot (each row carries the slot's one total)"),
        ],
    ),
    "api_calls": (
        False,
        [
            ("call_id", u64, "the call (launches.api_call_id)"),
            ("name", s, "the CUDA API function"),
            ("enter_ns", u64, "host CLOCK_MONOTONIC at entry"),
            ("exit_ns", u64, "host CLOCK_MONOTONIC at exit"),
            ("thread_id", u32, "host thread"),
            ("depth", u32, "nesting depth"),
            ("result", pa.int32(), "the call's return code"),
        ],
    ),
    "clock": (
        True,
        [
            ("device_ns", u64, "%globaltimer read by a probe kernel"),
            ("monotonic_before", u64, "host CLOCK_MONOTONIC read before it"),
            ("monotonic_after", u64, "and after it"),
            ("boottime_before", u64, "host CLOCK_BOOTTIME before"),
            ("boottime_after", u64, "and after"),
            ("realtime_before", u64, "host CLOCK_REALTIME before"),
            ("realtime_after", u64, "and after"),
            ("used", b, "the sample is part of the relation below (a measured probe)"),
            ("offset_ns", f64, "the GPU's relation: device - host MONOTONIC, median of the used samples"),
            ("uncertainty_ns", f64, "half the widest bracket used"),
            ("realtime_offset_ns", f64, "device - host REALTIME, median"),
        ],
    ),
}


def schema(table: str) -> pa.Schema:
    meta = {b"gpuobs_parquet_schema_version": str(SCHEMA_VERSION).encode(), b"gpuobs_table": table.encode()}
    return pa.schema([pa.field(name, kind) for name, kind, _ in TABLES[table][1]], metadata=meta)


def type_name(kind: pa.DataType) -> str:
    """The type as docs/parquet-schema.md names it."""
    return "string (dictionary)" if pa.types.is_dictionary(kind) else str(kind)


def partitioned_by_gpu(table: str) -> bool:
    return TABLES[table][0]
