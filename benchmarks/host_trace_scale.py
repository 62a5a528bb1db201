"""Large --host traces: a generated PyTorch-profiler JSON (about 216 MB) and an
Nsight Systems SQLite export (about 54 MB), the sizes that once took 56 s and
2.3 GB, and 38 s and 3.2 GB. Each is read alone (load_host_trace) and exported
beside a small recording (`gpuobs export --host`), each in its own process;
the peak resident memory is that process's own (wait4). Exits 1 when a limit is
broken: peak memory above the baseline (the same command without --host) more
than --max-json-ratio (--max-sqlite-ratio) times the input's size, or more than
--max-seconds. SQLite rows are dense (about 50 bytes per event against JSON's
200): its limit is set higher for the same memory per event.

    python benchmarks/host_trace_scale.py [--json-mb 216] [--sqlite-mb 54] [--max-seconds 120]
"""

import argparse
import json
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import measure  # noqa: E402

from gpuobs.recording_file import synthetic  # noqa: E402
from tests.nsys_fixture import SCHEMA, global_tid  # noqa: E402

BASE = 1_790_857_026_000_000_000
KERNEL_NAMES = [f"void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_{i}>(int, Op)" for i in range(40)]
OPS = ["aten::mm", "aten::add", "aten::silu", "aten::mul", "aten::copy_", "aten::empty", "aten::linear"]
LOAD = (
    "import sys; from gpuobs.host_traces.nsys import load_host_trace; h = load_host_trace(sys.argv[1]); "
    "print(len(h.events), len(h.kernels))"
)


def kineto_json(path: Path, megabytes: float) -> int:
    """A Kineto-shaped trace: per step a CPU op, its launch call, the kernel, and the flow pair."""
    events, size, step = 0, 0, 0
    with open(path, "w") as fh:
        fh.write(
            '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}],\n'
            '"traceEvents": [\n'
        )
        first = True
        while size < megabytes * 1e6:
            t = step * 20.0
            name = KERNEL_NAMES[step % len(KERNEL_NAMES)]
            batch = [
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": OPS[step % len(OPS)],
                    "pid": 803,
                    "tid": 803,
                    "ts": t,
                    "dur": 12.5,
                    "args": {"External id": step, "Record function id": 0, "Ev Idx": step},
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 803,
                    "tid": 803,
                    "ts": t + 1.0,
                    "dur": 4.2,
                    "args": {"External id": step, "cbid": 211, "correlation": step},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 6.0,
                    "dur": 9.1,
                    "args": {
                        "External id": step,
                        "queued": 0,
                        "device": 0,
                        "context": 1,
                        "stream": 7,
                        "correlation": step,
                        "registers per thread": 32,
                        "shared memory": 0,
                        "blocks per SM": 3.2,
                        "warps per SM": 12.9,
                        "grid": [424, 1, 1],
                        "block": [128, 1, 1],
                        "est. achieved occupancy %": 100,
                    },
                },
                {"ph": "s", "id": step, "pid": 803, "tid": 803, "ts": t + 1.0, "cat": "ac2g", "name": "ac2g"},
                {"ph": "f", "id": step, "pid": 0, "tid": 7, "ts": t + 6.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
            ]
            text = ",\n".join(json.dumps(e) for e in batch)
            fh.write(text if first else ",\n" + text)
            first = False
            size += len(text) + 2
            events += len(batch)
            step += 1
        fh.write(f'\n],\n"traceName": "{path}", "displayTimeUnit": "ms", "baseTimeNanoseconds": {BASE}}}\n')
    return events


def nsys_sqlite(path: Path, megabytes: float) -> int:
    """An nsys-shaped export: per step a kernel, its runtime call and an NVTX range."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    session = BASE
    db.execute("insert into TARGET_INFO_SESSION_START_TIME values (?, '', '')", (session,))
    names = {n: i + 1 for i, n in enumerate(KERNEL_NAMES + ["cudaLaunchKernel", "python3"])}
    db.executemany("insert into StringIds values (?, ?)", [(i, n) for n, i in names.items()])
    gtid = global_tid(803, 803)
    db.execute("insert into ThreadNames values (?, 0, ?)", (names["python3"], gtid))
    rows, batch = 0, 20_000
    while path.stat().st_size < megabytes * 1e6:
        steps = range(rows, rows + batch)
        db.executemany(
            "insert into CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, "
            "blockZ, gridId) values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    s * 20_000 + 6_000,
                    s * 20_000 + 15_100,
                    0,
                    1,
                    7,
                    s,
                    global_tid(803, 0),
                    names[KERNEL_NAMES[s % len(KERNEL_NAMES)]],
                    names[KERNEL_NAMES[s % len(KERNEL_NAMES)]],
                    424,
                    1,
                    1,
                    128,
                    1,
                    1,
                    s + 1,
                )
                for s in steps
            ],
        )
        db.executemany(
            "insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?,?,?,?,?,?,?,?)",
            [(s * 20_000 + 1_000, s * 20_000 + 5_200, 0, gtid, s, names["cudaLaunchKernel"], 0, 0) for s in steps],
        )
        db.executemany(
            "insert into NVTX_EVENTS (start, end, eventType, text, globalTid) values (?,?,?,?,?)",
            [(s * 20_000, s * 20_000 + 12_500, 59, OPS[s % len(OPS)], gtid) for s in steps],
        )
        db.commit()
        rows += batch
    db.close()
    return rows * 3


def nsys_rows(path: Path, megabytes: float) -> int:
    """nsys_sqlite's file with a name and a thread per row: the kernels' demangledName and
    streamId, the runtime's nameId and globalTid and NVTX's globalTid set to the rowid
    (every kernel a name of its own not in StringIds, every row a track of its own)."""
    events = nsys_sqlite(path, megabytes)
    db = sqlite3.connect(path)
    db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set demangledName = rowid, streamId = rowid")
    db.execute("update CUPTI_ACTIVITY_KIND_RUNTIME set nameId = rowid, globalTid = rowid")
    db.execute("update NVTX_EVENTS set globalTid = rowid")
    db.commit()
    db.close()
    return events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json-mb", type=float, default=216)
    ap.add_argument("--sqlite-mb", type=float, default=54)
    ap.add_argument(
        "--max-json-ratio",
        type=float,
        default=2.0,
        help="limit: peak memory above the baseline, in multiples of a JSON input's size",
    )
    ap.add_argument("--max-sqlite-ratio", type=float, default=8.0, help="the same for an SQLite input")
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument(
        "--only",
        choices=["json", "sqlite", "rows"],
        help="make and measure only this input (rows: the SQLite file with a name and thread per row, "
        "not made unless asked)",
    )
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rec = synthetic.write_block_trace_recording(tmp / "small.gpuobs", n_launches=12, blocks_per_launch=256)
        export = [sys.executable, "-m", "gpuobs", "export", str(rec), "-f"]
        baseline = measure(export + ["-o", str(tmp / "base.pftrace")], env)
        assert baseline.returncode == 0, baseline.output
        imported = measure([sys.executable, "-c", "import gpuobs.host_traces.nsys"], env)
        print(
            f"baseline (export of a small recording, no --host): {baseline.seconds:.2f} s, "
            f"{baseline.peak_mb:.0f} MB peak; Python importing the reader: {imported.seconds:.2f} s\n"
        )
        print("| input | MB | events | step | s | s per GB raw / beyond start | peak MB | (peak - baseline) / input |")
        print("|---|---|---|---|---|---|---|---|")
        inputs = (
            ("json", "Kineto JSON", kineto_json, args.json_mb, args.max_json_ratio),
            ("sqlite", "nsys SQLite", nsys_sqlite, args.sqlite_mb, args.max_sqlite_ratio),
            ("rows", "nsys SQLite, a name and thread per row", nsys_rows, args.sqlite_mb, args.max_sqlite_ratio),
        )
        for key, kind, make, mb, limit in inputs:
            if args.only != key and (args.only or key == "rows"):
                continue
            host = tmp / ("prof.json" if "JSON" in kind else "run.sqlite")
            events = make(host, mb)
            size = host.stat().st_size / 2**20
            for step, cmd, start in (
                ("load", [sys.executable, "-c", LOAD, str(host)], imported.seconds),
                ("export", export + ["--host", str(host), "-o", str(tmp / "t.pftrace")], baseline.seconds),
            ):
                run = measure(cmd, env)
                if run.returncode != 0:
                    failed.append(f"{kind} {step} failed: {run.output[-2000:]}")
                    continue
                ratio = (run.peak_mb - baseline.peak_mb) / size
                gb = host.stat().st_size / 1e9
                print(
                    f"| {kind} | {size:.0f} | {events:,} | {step} | {run.seconds:.2f} | {run.seconds / gb:.1f} / "
                    f"{(run.seconds - start) / gb:.1f} | {run.peak_mb:.0f} | {ratio:.2f} |",
                    flush=True,
                )
                if ratio > limit:
                    failed.append(
                        f"{kind} {step}: peak {run.peak_mb:.0f} MB is {ratio:.2f}x the input above the "
                        f"baseline (limit {limit}x)"
                    )
                if run.seconds > args.max_seconds:
                    failed.append(f"{kind} {step}: {run.seconds:.0f} s (limit {args.max_seconds} s)")
    for line in failed:
        print(f"LIMIT BROKEN: {line}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
