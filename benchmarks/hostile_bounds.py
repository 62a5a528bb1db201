"""Hostile recordings must cost what their bytes allow: at most ~4x the file's size
plus a fixed 200 MB of memory, and at most 10 s per GB (issue 38). Each recording
below is valid (CRCs hold, every value passes the reader's checks) but is shaped to
make a reader that allocates per item pay far more than the bytes:

  empty-launches   N LAUNCHES chunks of no launches (24 bytes each)
  one-launch       N LAUNCHES chunks of one launch each, then one FLUSH
  clock-chunks     N CLOCK chunks of one sample each (the tool's own shape, many times over)
  clock-samples    one CLOCK chunk of N samples
  notices          N NOTICE chunks of an empty text
  api-names        N API_NAMES chunks, each a 1-character name

Each command runs in its own process (wall seconds, peak RSS from wait4). Python's
start and imports (~0.3-0.5 s, ~60-110 MB) are part of every number; "start" is the
same command on a recording of the same shape with one item (the median of three
runs), and "beyond start" what the N items cost over it, per GB of the file. With
several --n, "growth" is how much the beyond-start time grew from the previous N
(linear work: the ratio of the N's; not said of less than 0.1 s). Exits 1 when a memory bound (4x size + 200 MB)
is missed; time is reported against 10 s/GB.

    python benchmarks/hostile_bounds.py [--n 1000000[,4000000]] [--shapes empty-launches,clock-samples]
                                        [--commands info,export] [--before DIR]

--before DIR runs each command with the gpuobs of another checkout too, right before
this one's, on the same file (a before/after table measured side by side).
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import measure  # noqa: E402

from gpuobs.recording_file import schema  # noqa: E402
from gpuobs.recording_file.fileformat import pack_chunk  # noqa: E402
from gpuobs.recording_file.recording_writer import RecordingWriter  # noqa: E402

ChunkType = schema.ChunkType
MEASURABLE_S = 0.1  # growth is said of work beyond the start of at least this (the start varies by ~0.05 s)
COMMANDS = {
    "info": ["info", "{rec}"],
    "stats": ["stats", "{rec}"],
    "info-json": ["info", "--json", "{rec}"],  # every notice listed
    "export": ["export", "{rec}", "-o", "{tmp}/t.pftrace", "-f"],
}


def _clock_samples(n: int) -> np.ndarray:
    s = np.zeros(n, schema.dtype("gpuobs_clock_sample"))
    t = np.arange(n, dtype=np.uint64) * np.uint64(1000) + np.uint64(10**9)
    s["method"] = 1
    s["device_ns"] = t + np.uint64(500)
    for clock in ("monotonic", "boottime", "realtime"):
        s[f"{clock}_before"] = t
        s[f"{clock}_after"] = t + np.uint64(1000)
    return s


def _launch() -> np.ndarray:
    launch = np.zeros(1, schema.dtype("gpuobs_launch"))
    launch["grid_id"] = 1
    launch["launch_id"] = 1
    launch["grid"] = (1, 1, 1)
    launch["block"] = (32, 1, 1)
    return launch


def write(path: Path, shape: str, n: int) -> None:
    with RecordingWriter(path) as w:
        w.run(pid=7, mode=schema.Mode.BLOCK_TRACE, argv=["hostile"])
        w.device(sm_count=132)
        w.module(module_id=1)
        w.function(function_slot=0, mangled="_Z1kv", demangled="k()")
        fh = w._fh
        if shape == "empty-launches":
            chunk = pack_chunk(ChunkType.LAUNCHES, b"")
            for _ in range(n // 65536):
                fh.write(chunk * 65536)
            fh.write(chunk * (n % 65536))
        elif shape == "one-launch":
            chunk = pack_chunk(ChunkType.LAUNCHES, _launch().tobytes())
            fh.write(chunk * n)
        elif shape == "clock-chunks":
            fh.write(b"".join(pack_chunk(ChunkType.CLOCK, s.tobytes()) for s in _clock_samples(n)))
        elif shape == "clock-samples":
            w.clock_samples(_clock_samples(n))
        elif shape == "notices":
            one = np.zeros(1, schema.dtype("gpuobs_notice"))
            fh.write(pack_chunk(ChunkType.NOTICE, one.tobytes()) * n)
        elif shape == "api-names":
            one = np.zeros(1, schema.dtype("gpuobs_api_name"))
            one["name_len"] = 1
            fh.write(b"".join(pack_chunk(ChunkType.API_NAMES, _api_name(one, i)) for i in range(n)))
        else:
            raise SystemExit(f"unknown shape {shape}")
        w.flush(attempted=0, recorded=0, dropped=0)
        w.end(flushes=1)


def _api_name(one, i):
    one["api_id"] = i
    return one.tobytes() + b"x"


def write_apart(path: Path, shape: str, n: int) -> None:
    """write() in a process of its own: a child's peak RSS from wait4 includes the
    peak of the process it was forked from (Linux keeps the larger at exec), so the
    memory the recordings take to make must not be this process's."""
    subprocess.run([sys.executable, __file__, "--write", shape, str(n), str(path)], check=True)


def _start_seconds(cmd_of, tmp: str, shape: str, env: dict) -> float:
    """The fixed cost of a command: its median time on a one-item recording of `shape`."""
    rec = Path(tmp) / f"{shape}-one.gpuobs"
    if not rec.exists():
        write_apart(rec, shape, 1)
    return float(np.median([measure(cmd_of(rec), env=env).seconds for _ in range(3)]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1000000", help="items per recording; several, comma-separated, for growth")
    ap.add_argument("--shapes", default="empty-launches,one-launch,clock-chunks,clock-samples,notices,api-names")
    ap.add_argument("--commands", default="info,export")
    ap.add_argument("--before", type=Path, help="a checkout whose gpuobs runs each command too, for comparison")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command: the median time, the largest peak")
    ap.add_argument("--write", nargs=3, metavar=("SHAPE", "N", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        shape, n, path = args.write
        write(Path(path), shape, int(n))
        return 0
    sizes = [int(n) for n in args.n.split(",")]
    versions = [("", {**os.environ, "PYTHONPATH": str(ROOT / "exporter")})]
    if args.before:
        versions.insert(0, ("before: ", {**os.environ, "PYTHONPATH": str(args.before.resolve() / "exporter")}))
    missed = False
    print(
        "| shape | items | file MB | command | s | start s | peak MB | bound MB | s per GB "
        "| beyond start: s per GB | growth | rc |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            beyond_before: dict = {}  # (command, version) -> (items, seconds beyond start) at the previous N
            starts: dict = {}
            for n in sizes:
                rec = Path(tmp) / f"{shape}.gpuobs"
                write_apart(rec, shape, n)
                mb = rec.stat().st_size / 1e6
                for command, (label, env) in ((c, v) for c in args.commands.split(",") for v in versions):

                    def cmd_of(path, command=command):
                        args_ = [a.format(rec=path, tmp=tmp) for a in COMMANDS[command]]
                        return [sys.executable, "-m", "gpuobs"] + args_

                    key = (command, label)
                    if key not in starts:
                        starts[key] = _start_seconds(cmd_of, tmp, shape, env)
                    runs = [measure(cmd_of(rec), env=env) for _ in range(args.repeat)]
                    r = runs[0]
                    r.seconds = float(np.median([run.seconds for run in runs]))
                    r.peak_mb = max(run.peak_mb for run in runs)
                    bound = 4 * mb + 200
                    missed |= r.peak_mb > bound and not label
                    beyond = max(r.seconds - starts[key], 0.0)
                    growth = ""
                    if key in beyond_before and beyond_before[key][1] >= MEASURABLE_S:
                        items, seconds = beyond_before[key]
                        growth = f"{beyond / seconds:.2f}x for {n / items:.0f}x"
                    elif key in beyond_before:
                        growth = "(too little to tell)"
                    beyond_before[key] = (n, beyond)
                    print(
                        f"| {shape} | {n:,} | {mb:.1f} | {label}{command} | {r.seconds:.2f} | {starts[key]:.2f} "
                        f"| {r.peak_mb:.0f} | {bound:.0f} | {r.seconds / (mb / 1000):.1f} "
                        f"| {beyond / (mb / 1000):.1f} | {growth} | {r.returncode} |",
                        flush=True,
                    )
                    if r.returncode not in (0, 2):
                        print(r.output[-2000:], file=sys.stderr)
                rec.unlink()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
