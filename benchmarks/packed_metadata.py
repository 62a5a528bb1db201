"""How small packing makes a serving run's launch metadata, and how fast: a CUDA graph
of --nodes kernel nodes replayed back to back (synthetic.graph_replay_tables), its
LAUNCHES rows and FLUSH launch counts cut into one chunk per --flush-replays replays
as the drain writes them, each packed as the tool packs it (rows byte-shuffled, zlib
level 1: packed_chunks.pack) and unpacked as the reader unpacks it. Against it:
zlib level 1 on the raw rows. CPU only; prints one line per table.

    python benchmarks/packed_metadata.py [--launches 100000] [--nodes 565] [--flush-replays 8] [--repeat 5]
"""

import argparse
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))

from gpuobs.recording_file import packed_chunks, schema, synthetic  # noqa: E402

ChunkType = schema.ChunkType


def _payloads(table, chunk_type, rows_per_chunk):
    head = bytes(packed_chunks.layout(chunk_type)[1])  # FLUSH: its gpuobs_flush_info, stored as it is
    return [head + table[i : i + rows_per_chunk].tobytes() for i in range(0, len(table), rows_per_chunk)]


def _best(repeat, work):
    """The fastest of `repeat` runs of work() (seconds) and its result."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=100_000)
    p.add_argument("--nodes", type=int, default=565)
    p.add_argument("--flush-replays", type=int, default=8, help="replays per flush (one chunk each)")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    launches, counts = synthetic.graph_replay_tables(-(-args.launches // args.nodes), args.nodes)
    rows = args.flush_replays * args.nodes
    print(f"{len(launches):,} launches, {args.nodes} nodes a replay, {rows:,} launches a chunk")
    for name, table, chunk_type in (("LAUNCHES", launches, ChunkType.LAUNCHES), ("FLUSH", counts, ChunkType.FLUSH)):
        payloads = _payloads(table, chunk_type, rows)
        raw = sum(len(x) for x in payloads)
        pack_s, packed = _best(args.repeat, lambda p=payloads, t=chunk_type: [packed_chunks.pack(x, t) for x in p])
        unpack_s, _ = _best(args.repeat, lambda p=packed, t=chunk_type: [packed_chunks.unpack(x, t) for x in p])
        plain_s, plain = _best(args.repeat, lambda p=payloads: [zlib.compress(x, 1) for x in p])
        stored = sum(len(x) for x in packed)
        print(
            f"{name:9s} {raw / 1e6:7.2f} MB -> {stored / 1e3:8.1f} KB packed: {raw / stored:5.1f}x, "
            f"pack {raw / pack_s / 1e6:4.0f} MB/s, unpack {raw / unpack_s / 1e6:4.0f} MB/s; "
            f"zlib 1 alone {raw / sum(len(x) for x in plain):4.1f}x at {raw / plain_s / 1e6:4.0f} MB/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
