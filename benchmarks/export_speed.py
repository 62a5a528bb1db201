"""Export speed and size on a synthetic 1,048,576-record block_trace recording on
132 SMs, against a straightforward writer (one perfetto_trace_pb2 message per
event), side by side in one run. Peak memory is the process's max RSS growth.

    python benchmarks/export_speed.py [--naive-sample 100000]
"""

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import gpuobs
from gpuobs.perfetto_export.export import ExportOptions, export
from gpuobs.recording_file import synthetic


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def naive_export(rec, out, limit):
    """One protobuf message per begin/end, named by string, absolute timestamps."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    ev = rec.events[:limit]
    trace = pb.Trace()
    tracks = {}
    for sm in np.unique(ev["sm_id"]):
        p = trace.packet.add()
        p.track_descriptor.uuid = int(sm) + 1
        p.track_descriptor.name = f"SM {int(sm)}"
        tracks[int(sm)] = int(sm) + 1
    for e in ev:
        name = rec.function(0, int(e["function_slot"])).name
        for ts, kind in ((int(e["time_start"]), 1), (int(e["time_end"]), 2)):
            p = trace.packet.add()
            p.timestamp = ts
            p.trusted_packet_sequence_id = 1
            p.track_event.type = kind
            p.track_event.track_uuid = tracks[int(e["sm_id"])]
            if kind == 1:
                p.track_event.name = name
                p.track_event.debug_annotations.add(name="block", int_value=int(e["block_x"]))
    Path(out).write_bytes(trace.SerializeToString())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=1024)
    ap.add_argument("--naive-sample", type=int, default=100_000, help="events the naive writer is timed on")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.gpuobs"
        synthetic.write_block_trace_recording(path, n_launches=args.launches, blocks_per_launch=1024, sm_count=132)
        size_rec = path.stat().st_size
        t = time.perf_counter()
        rec = gpuobs.load(path)
        n = len(rec.events)
        load_s = time.perf_counter() - t
        base_rss = rss_mb()
        out = Path(tmp) / "t.pftrace"
        compact = Path(tmp) / "c.pftrace"
        timings = {"export": [], "compact": [], "naive": []}
        # Rounds interleave the three writers: this machine is shared and noisy.
        for _ in range(args.rounds):
            t = time.perf_counter()
            summary = export([rec], out)
            timings["export"].append(time.perf_counter() - t)
            t = time.perf_counter()
            export([rec], compact, ExportOptions(block_args=False))
            timings["compact"].append(time.perf_counter() - t)
            t = time.perf_counter()
            naive_export(rec, Path(tmp) / "n.pftrace", args.naive_sample)
            timings["naive"].append((time.perf_counter() - t) / args.naive_sample)
        peak = rss_mb() - base_rss
        compact_bytes = compact.stat().st_size
        export_s, compact_s = np.median(timings["export"]), np.median(timings["compact"])
        naive_per_event = np.median(timings["naive"])
        first_s = timings["export"][0]
    lines = [
        f"records: {n:,} on 132 SMs; recording {size_rec / 2**20:.1f} MiB; load {load_s * 1e3:.0f} ms (zero-copy)",
        f"export (median of {args.rounds}; first call {first_s:.2f} s): {export_s:.2f} s = "
        f"{n / export_s / 1e6:.2f} M records/s; {summary.bytes / 1e6:.1f} MB "
        f"= {summary.bytes / n:.1f} B/block slice (with block + launch args, kernel slices and tracks included)",
        f"export --no-block-args: {compact_s:.2f} s; {compact_bytes / 1e6:.1f} MB "
        f"= {compact_bytes / n:.1f} B/block slice",
        f"peak memory growth during export: {peak:.0f} MiB = {peak / (size_rec / 2**20):.1f}x the recording",
        f"naive writer: {naive_per_event * 1e6:.2f} us/record (median; timed on {args.naive_sample:,}) -> "
        f"{naive_per_event * n:.1f} s for all; gpuobs is {naive_per_event * n / export_s:.0f}x faster",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
