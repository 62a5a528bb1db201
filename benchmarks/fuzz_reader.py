"""The long fuzz run of the reader: N damaged variants of a recording (default
10,000); any exception other than gpuobs.RecordingError is a bug.

    python benchmarks/fuzz_reader.py --cases 10000
"""

import argparse
import random
import tempfile
from pathlib import Path

import gpuobs
from gpuobs.errors import RecordingError
from gpuobs.recording_file import synthetic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "r.gpuobs"
        synthetic.write_block_trace_recording(src, n_launches=3, blocks_per_launch=50, sm_count=8)
        data = src.read_bytes()
        path = Path(tmp) / "d.gpuobs"
        outcomes = {"loaded": 0, "error": 0, "salvaged": 0}
        for _ in range(args.cases):
            buf = bytearray(data)
            for _ in range(rng.randint(0, 4)):
                buf[rng.randrange(len(buf))] ^= rng.randint(1, 255)
            path.write_bytes(bytes(buf[: len(buf) - rng.randint(0, 3000)]))
            try:
                gpuobs.load(path)
                outcomes["loaded"] += 1
            except RecordingError:
                outcomes["error"] += 1
            try:
                gpuobs.load(path, salvage=True)
                outcomes["salvaged"] += 1
            except RecordingError as exc:
                assert exc.offset < 56, exc
    print(f"{args.cases} cases, no undocumented failure: {outcomes}")


if __name__ == "__main__":
    main()
