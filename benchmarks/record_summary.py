"""How long `gpuobs record` takes to summarise a long serving run once the program has
exited. The summary reads the recording's small chunks and a few numbers of each chunk
that grows with the run's launches (record/finish.py); `record` works those out while
the program runs (record/follower.py), so what is left at the exit is the last half
second's. The recording is a soak's shape (synthetic.graph_replay_tables: a CUDA graph
of --nodes kernels replayed --replays times, cut into --flushes packed flushes, a few
records each); the defaults are the ten-minute soak's block_trace run (47,000 replays
of the 36-kernel decode step over 7,507 flushes). The tool lists every node of every
replay: the 90 s soak of 2026-12-07 wrote 563 rows a replay, 14.7M in all (`--replays
26050 --nodes 563 --flushes 4134`). CPU only.

Each run prints the summary read cold (nothing followed: every growing chunk read at
the exit) and, with --follow S, the summary after the file grew over S seconds while
record's follower followed it, as during a real run (and the follower's CPU time).
--recording times a real recording's cold summary instead (a soak's, `soak.py --keep`).

    python benchmarks/record_summary.py [--replays 47000] [--nodes 36] [--flushes 7507] [--follow 20] [--repeat 3]
    python benchmarks/record_summary.py --recording RUN.gpuobs [--repeat 3]
"""

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))

from gpuobs import cli  # noqa: E402
from gpuobs.record.follower import Follower  # noqa: E402
from gpuobs.recording_file import synthetic  # noqa: E402


def write_serving_run(path: Path, replays: int, nodes: int, flushes: int) -> int:
    """The soak-shaped recording, packed as the tool packs it; returns its launch count
    (a few block records a window: the summary skips them whatever their number)."""
    launches, counts = synthetic.graph_replay_tables(replays, nodes)
    return synthetic.write_graph_replay_recording(path, launches, counts, flushes)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replays", type=int, default=47_000)
    p.add_argument("--nodes", type=int, default=36)
    p.add_argument("--flushes", type=int, default=7_507)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--follow", type=float, default=0, help="also: the file grown over this many seconds, followed")
    p.add_argument("--recording", type=Path, help="time this recording's summary (no synthetic one)")
    args = p.parse_args()
    if args.recording is not None:
        if not args.recording.is_file():
            p.error(f"--recording {args.recording}: no such file")
        time_summary(args.recording, args.repeat, "a real recording")
        return 0
    with tempfile.TemporaryDirectory(prefix="gpuobs-summary-") as tmp:
        path = Path(tmp) / "serving.gpuobs"
        launches = write_serving_run(path, args.replays, args.nodes, args.flushes)
        what = f"{launches:,} launches in {args.flushes:,} flushes"
        time_summary(path, args.repeat, what + ", cold")
        if args.follow > 0:
            time_followed(path, Path(tmp) / "followed.gpuobs", args.follow, args.repeat, what)
    return 0


def time_followed(source: Path, path: Path, seconds: float, repeat: int, what: str) -> None:
    """source written again at `path` over `seconds` (64 KiB at a time, at an even rate)
    while a Follower follows it, as record's does; then the summary with its facts."""
    size = source.stat().st_size
    follower = Follower(path)
    follower.start()
    began = time.monotonic()
    with open(source, "rb") as src, open(path, "wb") as out:
        while True:
            piece = src.read(1 << 16)
            if not piece:
                break
            out.write(piece)
            out.flush()
            lag = began + seconds * out.tell() / size - time.monotonic()
            if lag > 0:
                time.sleep(lag)
    follower.stop()
    cache = follower.cache_for(path)
    print(
        f"followed over {time.monotonic() - began:.1f} s: {follower.looks} looks, {follower.busy_s:.2f} s of CPU, "
        f"{len(cache.chunks) if cache else 0:,} chunks' facts"
    )
    time_summary(path, repeat, what + ", followed", cache)


def time_summary(path: Path, repeat: int, what: str, cache=None) -> None:
    """Prints record's summary line for path and how long it took, best of repeat."""
    times, line = [], ""
    for _ in range(repeat):
        said = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stderr(said):
            cli._print_record_summary(path, cache)
        times.append(time.perf_counter() - started)
        line = said.getvalue().strip()
    print(line)
    print(
        f"{what}, {path.stat().st_size / 1e6:.1f} MB: "
        f"summary {min(times):.2f} s (best of {repeat}; every run {', '.join(f'{t:.2f}' for t in times)})"
    )


if __name__ == "__main__":
    sys.exit(main())
