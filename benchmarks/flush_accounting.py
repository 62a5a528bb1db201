"""Flush by flush, a recording's accounting: the blocks (or accesses) the device counted
in each flush window (every counter slot once) against the records it attempted plus
those sampled out; where they differ, which launch-count rows the window holds and how
they stand against the windows either side. What `benchmarks/soak.py` reports as
flushes "apart", explained (it found the snapshot windows merged into later ones).

    python3 benchmarks/flush_accounting.py RECORDING.gpuobs [--show 6]

Exits 1 when some flush is apart.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import gpuobs
from gpuobs.analysis.launches import counted_by_flush
from gpuobs.recording_file import schema


def apart_flushes(rec) -> dict:
    """(device, flush_seq) -> counted + unattributed - attempted - sampled out, where not 0."""
    counted = counted_by_flush(rec)
    sampled = {(int(s["device_index"]), int(s["flush_seq"])): int(s["sampled_out"]) for s in rec.sampling}
    out = {}
    for f in rec.flushes:
        key = (int(f["device_index"]), int(f["flush_seq"]))
        diff = counted.get(key, 0) + int(f["unattributed"]) - int(f["attempted"]) - sampled.get(key, 0)
        if diff:
            out[key] = diff
    return out


def explain(rec, key: tuple, diff: int) -> list[str]:
    """The flush's totals and its count rows that disagree with its block records,
    each beside the same grid id's rows in the flushes either side."""
    dev, seq = key
    c = rec.launch_counts
    rows = {}
    for s, g, n, shared in zip(
        c["flush_seq"][c["device_index"] == dev].tolist(),
        c["grid_id"][c["device_index"] == dev].tolist(),
        c["count"][c["device_index"] == dev].tolist(),
        c["launches_sharing"][c["device_index"] == dev].tolist(),
    ):
        rows[(s, g)] = (n, shared)
    ev = rec.events
    blocks = (ev["kind"] == schema.EventKind.BLOCK) & (rec.event_devices == dev)
    records = Counter(zip(rec.event_flushes[blocks].tolist(), ev["grid_id"][blocks].tolist()))
    lines = [f"flush {seq} (device {dev}): counted - (attempted + sampled out) = {diff:+,}"]
    grids = sorted({g for (s, g) in rows if s == seq} | {g for (s, g) in records if s == seq})
    shared = sum(1 for g in grids if rows.get((seq, g), (0, 1))[1] > 1)
    lines.append(f"  {len(grids)} grid ids, {shared} with count rows shared by more than one launch")
    lines.append("  grid id: (count, sharing) records | before: (count, sharing) | after: (count, sharing)")
    for g in grids[:12]:
        flags = rec.launches["flags"][rec.launches["grid_id"] == g][:1].tolist()
        lines.append(
            f"  {g}: {rows.get((seq, g))} {records.get((seq, g), 0)} | {rows.get((seq - 1, g))} | "
            f"{rows.get((seq + 1, g))}  flags {flags}"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recording")
    p.add_argument("--show", type=int, default=6, help="explain this many flushes that are apart")
    args = p.parse_args()
    rec = gpuobs.load(args.recording)
    apart = apart_flushes(rec)
    print(
        f"{args.recording}: {len(rec.flushes):,} flushes, {len(apart):,} apart, their differences sum to "
        f"{sum(apart.values()):+,}"
    )
    keys = sorted(apart)
    print("apart (flush, difference):", [(k[1], apart[k]) for k in keys[:30]])
    for k in keys[: args.show]:
        print("\n".join(explain(rec, k, apart[k])))
    return 1 if apart else 0


if __name__ == "__main__":
    sys.exit(main())
