"""The C scan of Kineto traces (host_traces/kineto_scan.c) against the Python reader
on mutated copies of a real trace: for each case the scan gives the same trace or the
same error as Python, or stops and leaves the file to Python; any other outcome (a
difference, an exception of another kind, a crash) fails it. Mutations: random bytes,
JSON tokens and escapes inserted (lone surrogates, long numbers, invalid UTF-8), spans
deleted or copied elsewhere.

    python benchmarks/fuzz_kineto_scan.py --cases 2000 [--seed 1]
    python benchmarks/fuzz_kineto_scan.py --cases 500 --asan   # the scan built with ASan and UBSan (gcc)

--asan builds kineto_scan.c with -fsanitize=address,undefined and runs itself again with
the sanitizer runtimes preloaded, so that a read or write out of bounds stops the run.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))

from gpuobs.host_traces import kineto, kineto_scan  # noqa: E402
from gpuobs.host_traces.trace import HostTraceError  # noqa: E402

SAMPLE = ROOT / "examples" / "data" / "side_by_side_profiler.json"
TOKENS = [
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"0",
    b"-",
    b"1e999",
    b"\\u",
    b"\\ud800",
    b"null",
    b"true",
    b" ",
    b"\n",
    b"9" * 25,
    b"\xff",
    b"\xc3",
    b".",
    b"e",
    b'"ts"',
    b'"dur"',
    b'"args"',
    b'"ph":"X"',
]


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(b))
        op = rng.random()
        if op < 0.3:
            b[i] = rng.randrange(256)
        elif op < 0.6:
            b[i:i] = rng.choice(TOKENS)
        elif op < 0.8:
            del b[i : i + rng.randint(1, 40)]
        else:
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randint(1, 200)]
    return bytes(b)


def canonical(value, depth=0):
    """A HostTrace as nested tuples, arrays as bytes, to compare two readings."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(canonical(x, depth + 1) for x in value)
    if isinstance(value, dict):
        return tuple(sorted((repr(k), canonical(x, depth + 1)) for k, x in value.items()))
    if hasattr(value, "__dict__") and depth < 6:
        return tuple(sorted((k, canonical(x, depth + 1)) for k, x in vars(value).items() if k != "path"))
    return repr(value)


def outcome(path: Path, scan):
    try:
        return ("trace", canonical(kineto._load(path, scan)))
    except kineto_scan.ScanStopped:
        return ("stopped", "")
    except HostTraceError as exc:
        return ("error", str(exc))


def asan_build(folder: Path) -> Path:
    lib = folder / "kineto_scan_asan.so"
    flags = ["-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    subprocess.run(["gcc", *flags, "-o", str(lib), str(kineto_scan.SOURCE)], check=True)
    return lib


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--asan", action="store_true", help="the scan built with ASan and UBSan (gcc)")
    p.add_argument("--library", default="", help=argparse.SUPPRESS)  # --asan's own run
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuobs-fuzz-kineto-"))
    if args.asan:
        runtimes = [
            subprocess.run(["gcc", f"-print-file-name={r}"], capture_output=True, text=True).stdout.strip()
            for r in ("libasan.so", "libubsan.so")
        ]
        env = dict(os.environ, LD_PRELOAD=":".join(runtimes), ASAN_OPTIONS="detect_leaks=0")
        cmd = [sys.executable, __file__, "--cases", str(args.cases), "--seed", str(args.seed)]
        return subprocess.run([*cmd, "--library", str(asan_build(work))], env=env).returncode
    lib = kineto_scan._FFI.dlopen(args.library) if args.library else kineto_scan.library()
    if lib is None:
        sys.exit("fuzz_kineto_scan: the scan cannot be built here (no C compiler?)")
    rng, source = random.Random(args.seed), SAMPLE.read_bytes()
    case, stopped, failed = work / "case.json", 0, 0
    for i in range(args.cases):
        case.write_bytes(mutate(source, rng))
        scanned = outcome(case, kineto_scan.Scan(lib))
        if scanned[0] == "stopped":
            stopped += 1
            continue
        if scanned != outcome(case, None):
            failed += 1
            kept = work / f"differs_{i}.json"
            kept.write_bytes(case.read_bytes())
            print(f"case {i}: the scan and Python differ ({scanned[0]}); kept as {kept}")
    print(
        f"{args.cases} cases (seed {args.seed}): {args.cases - stopped - failed} read the same by the scan and "
        f"Python, {stopped} left to Python, {failed} different"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
