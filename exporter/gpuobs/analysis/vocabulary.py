"""One set of names for what `stats`, `diff` and `info` report: a value has one JSON
key everywhere, and that key one CSV header, written as `nsys stats` writes its own
(cuda_gpu_kern_sum: "Time (%)", "Total Time (ns)", ... "Name"). Reports take their
CSV columns from here, so the same number cannot be headed two ways."""

from __future__ import annotations

from .text_table import Column

# JSON key -> CSV header
CSV_TITLES = {
    "recording": "Recording",
    "device": "Device",
    # the kernel time summary (stats --report kernels)
    "time_pct": "Time (%)",
    "total_ns": "Total Time (ns)",
    "instances": "Instances",
    "avg_ns": "Avg (ns)",
    "med_ns": "Med (ns)",
    "min_ns": "Min (ns)",
    "max_ns": "Max (ns)",
    "stddev_ns": "StdDev (ns)",
    "weak": "Weak",
    # blocks per kernel (stats --report blocks)
    "launches": "Launches",
    "blocks": "Blocks",
    "blocks_recorded": "Block Records",
    "sms": "SMs",
    "block_ns_p50": "Block p50 (ns)",
    "block_ns_p90": "Block p90 (ns)",
    "block_ns_p99": "Block p99 (ns)",
    "counted": "Counted",
    "counted_shared_launches": "Count Shared Launches",
    "memory_events": "Memory Samples",
    "blocks_dropped": "Blocks Dropped",
    "ends_unconfirmed": "Ends Unconfirmed",
    # how block ends are bounded per kernel (block_starts recordings)
    "blocks_bounded": "Blocks Bounded",
    "slot_pct": "Slot (%)",
    "stream_pct": "Stream (%)",
    "quiet_pct": "Quiet (%)",
    "none_pct": "None (%)",
    "weak_pct": "Weak (%)",
    "slots_incomplete": "Slots Incomplete",
    # the kernel's full name, last as in nsys
    "kernel": "Name",
}


def csv_columns(keys) -> list[Column]:
    """CSV columns for these JSON keys, headed as CSV_TITLES says."""
    return [Column(CSV_TITLES[key], key) for key in keys]


def compared_titles(key: str) -> tuple[str, str, str]:
    """The headers of one value compared between two recordings (`diff`): A's, B's and
    the ratio, e.g. "Total Time (ns) A", "Total Time (ns) B", "Total Time (B/A)"."""
    title = CSV_TITLES[key]
    return f"{title} A", f"{title} B", title.split(" (")[0] + " (B/A)"
