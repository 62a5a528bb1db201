"""Serving soak: the Qwen3-shaped decode step (one CUDA graph) replayed for minutes
under each recording mode at its defaults (data budget, ring, everything), in two
loops a server runs:

  b2b    replays queued back to back, a synchronisation only every --chunk replays
         (a server with asynchronous scheduling)
  sync   a synchronisation after every replay, the next tokens read back (the
         classic serving loop; the tool flushes at each one)

Every --every seconds each worker logs the device time per step over the last
interval (CUDA events), its host RSS (the tool lives in the program's process),
the GPU memory its process holds (nvidia-smi, per pid: the model plus the tool's
rings), and the recording's size so far. After the runs end, each recording's
own accounting is read flush by flush (metadata only, not its records):

  recorded + dropped == attempted, and attempted + sampled out == counted blocks

The summary sets the first logged interval after --warmup against the last:
host RSS flat within 5%, the file within the budget (at every flush, the budget's
bytes since the first module load plus its burst), every flush balanced. finish_s is how long `record`
took after the worker's last line; under GPUOBS_DEBUG=1 finish_parts_s splits it
into the program's own teardown, the tool's last flush, and the file's close, the
process's exit and record's summary (the tool's exit lines, timed as they arrive).

    python benchmarks/soak.py --seconds 600 --parallel --json soak.json   (on a GPU machine)
    python benchmarks/soak.py --runs block_counter:b2b --seconds 300 --record-args "--pack-metadata none"

--parallel runs every MODE:LOOP at once on the one GPU (they share it: step
times are then the shared GPU's, flat or not over time, not each mode's cost).
Where a command may run ten minutes at most (the lent GPU machine), a ten-minute
soak runs over two commands: benchmarks/detached_soak.sh start, then collect.
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = "block_counter:b2b,block_starts:b2b,block_trace:b2b,block_counter:sync,block_starts:sync,block_trace:sync"
LAST_FLUSH = re.compile(r"flush \d+ \(process exit\)")  # GPUOBS_DEBUG's line for the exit's drain
# record's own line under GPUOBS_DEBUG: its summary's time, and the chunks its follower had read
SUMMARY_TIME = re.compile(r"gpuobs: summary of .* in ([0-9.]+) s: ([0-9,]+) of ([0-9,]+) ")
RSS_FLAT = 0.05  # the target: host RSS flat within 5% from the first interval to the last


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def gpu_mb(pid: int) -> float:
    """GPU memory this process holds (nvidia-smi's per-process accounting), -1 where unknown."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return -1.0
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid) and fields[1].isdigit():
            return float(fields[1])
    return -1.0


def worker(args) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from decode_graph import build, capture

    model, tokens, pos = build(args.layers, batch=args.batch, max_len=args.max_len, hidden=args.hidden)
    graph, out = capture(model, tokens, pos)
    output = Path(os.environ.get("GPUOBS_OUTPUT", ""))
    per_sync = args.chunk if args.loop == "b2b" else 1
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = time.time()
    next_log, steps, times = start + args.every, 0, []
    while True:
        begin.record()
        for _ in range(per_sync):
            graph.replay()
            if args.loop == "sync":
                tokens.copy_(out)  # the next step's input, read back as a server does
        end.record()
        pos.add_(per_sync)
        if steps % 800 >= 800 - per_sync:
            pos.fill_(128)  # stay inside the KV cache
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end) / per_sync)
        steps += per_sync
        now = time.time()
        if now >= next_log:
            row = {
                "t": round(now - start, 1),
                "steps": steps,
                "step_ms": round(statistics.median(times), 4),
                "rss_mb": round(rss_mb(), 1),
                "gpu_mb": gpu_mb(os.getpid()),
                "recording_mb": round(output.stat().st_size / 2**20, 2) if output.is_file() else 0,
            }
            print("SOAK " + json.dumps(row), flush=True)
            times = []
            next_log += args.every
            if now - start >= args.seconds:
                break
    print("SOAK_EXIT " + json.dumps({"exit_time": time.time(), "steps": steps}), flush=True)


def worker_command(args, loop: str) -> list:
    return [
        sys.executable,
        __file__,
        "--worker",
        "--loop",
        loop,
        *("--seconds", str(args.seconds), "--every", str(args.every), "--chunk", str(args.chunk)),
        *("--layers", str(args.layers), "--hidden", str(args.hidden)),
        *("--batch", str(args.batch), "--max-len", str(args.max_len)),
    ]


class Run:
    """One MODE:LOOP soak: its `gpuobs record` process and the rows its worker logged."""

    def __init__(self, spec: str, args, workdir: Path):
        self.mode, _, self.loop = spec.partition(":")
        if self.loop not in ("b2b", "sync"):
            raise SystemExit(f"soak.py: {spec!r}: a run is MODE:LOOP with LOOP b2b or sync")
        self.name = f"{self.mode}:{self.loop}"
        own = workdir / f"{self.mode}_{self.loop}"  # a folder each: `record` locks its output's folder
        own.mkdir(parents=True, exist_ok=True)
        self.recording = own / "soak.gpuobs"
        self.stderr_path = own / "record.stderr"
        self.rows, self.exit, self.done_time, self.returncode = [], None, None, None
        self.tool_finish_started = self.tool_last_flush_done = None  # GPUOBS_DEBUG's lines, when they came
        self.summary_s = self.summary_chunks = None  # record's line: its summary's time, chunks followed/all
        cmd = [sys.executable, "-m", "gpuobs", "record", "--force", "--mode", self.mode, "-o", str(self.recording)]
        cmd += [*shlex.split(args.record_args), "--", *worker_command(args, self.loop)]
        self.log = open(own / "intervals.jsonl", "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.stderr_reader.start()
        # `record`'s end is timed as it happens: the parallel runs are waited for one
        # after another, and a run that ended while an earlier one was waited for is done.
        self.waiter = threading.Thread(target=self._wait_exit, daemon=True)
        self.waiter.start()

    def _wait_exit(self) -> None:
        self.returncode = self.proc.wait()
        self.done_time = time.time()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("SOAK "):
                row = json.loads(line[5:])
                self.rows.append(row)
                self.log.write(json.dumps({"run": self.name, **row}) + "\n")
                self.log.flush()
                print(self.name, json.dumps(row), flush=True)
            elif line.startswith("SOAK_EXIT "):
                self.exit = json.loads(line[10:])

    def _read_stderr(self) -> None:
        # Kept as written; under GPUOBS_DEBUG the tool's exit lines are timed as they come
        # (the tool writes stderr unbuffered, through record's inherited descriptor), so
        # the finish splits into the program's teardown, the tool's last flush and the rest.
        with open(self.stderr_path, "w") as kept:
            for line in self.proc.stderr:
                kept.write(line)
                if "process exit: callbacks" in line:
                    self.tool_finish_started = time.time()
                elif LAST_FLUSH.search(line):
                    self.tool_last_flush_done = time.time()
                elif SUMMARY_TIME.search(line):
                    said = SUMMARY_TIME.search(line)
                    self.summary_s = float(said.group(1))
                    self.summary_chunks = f"{said.group(2)} of {said.group(3)} followed"

    def finish_parts(self) -> dict | None:
        """Seconds from the worker's last line to the tool's finish starting (the program's
        own teardown), to its last flush written, to `record` done (the file closed, the
        process gone, record's summary, and of that the summary alone with how many of the
        growing chunks record's follower had read); None without GPUOBS_DEBUG's lines."""
        if not (self.exit and self.tool_finish_started and self.tool_last_flush_done):
            return None
        exit_time = self.exit["exit_time"]
        return {
            "program_teardown": round(self.tool_finish_started - exit_time, 2),
            "tool_last_flush": round(self.tool_last_flush_done - self.tool_finish_started, 2),
            "file_close_exit_and_summary": round(self.done_time - self.tool_last_flush_done, 2),
            "summary_alone": self.summary_s,
            "summary_chunks": self.summary_chunks,
        }

    def wait(self) -> None:
        self.waiter.join()
        self.stderr_reader.join(timeout=60)  # a child left running may hold the pipe open
        self.reader.join()
        self.log.close()


def flush_chunk_ends(path: Path) -> list[int]:
    """The file's size as each FLUSH chunk ends, in the order they were written (a walk
    of the chunk headers alone)."""
    import mmap

    import numpy as np

    from gpuobs.recording_file import schema
    from gpuobs.recording_file.fileformat import CHUNK_HEADER, FILE_HEADER

    ends = []
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        off, size = FILE_HEADER.itemsize, len(buf)
        while off + CHUNK_HEADER.itemsize <= size:
            head = np.frombuffer(buf, CHUNK_HEADER, 1, off)[0]
            off += CHUNK_HEADER.itemsize + int(head["length"])
            if int(head["type"]) == schema.ChunkType.FLUSH and off <= size:
                ends.append(off)
            del head  # (the mapping closes only when no view of it is left)
    return ends


def budget_curve(path: Path, rec, budget: int, burst: int) -> dict | None:
    """The file against the data budget flush by flush: its size as each flush ends
    (records, tables, names: all of it) against the bucket's allowance, burst + budget
    x the time since a start, from three starts: the first clock sample (the first
    flush: too strict, the bucket filled before it), the first module load (the first
    moment a record can be written; the bucket starts before it: the allowance the
    soak checks) and the tool's start (the RUN chunk: the loosest). Where the file is
    furthest over (or under) each, and
    its rate over the second half of the run, say whether an excess comes at the start,
    grows with the run (the rate kept too high) or comes at the end (the gate's last
    overshoot, which the bucket owes and has not yet paid back). One device only."""
    import numpy as np

    flushes = rec.flushes
    if not budget or len(flushes) < 2 or len(np.unique(flushes["device_index"])) != 1 or not len(rec.clock_samples):
        return None
    ends = np.asarray(flush_chunk_ends(path), np.float64)
    if len(ends) != len(flushes):
        return None
    t = flushes["host_time_ns"].astype(np.float64)
    out = {}
    for name, start in (
        ("from_first_clock_sample", float(rec.clock_samples["monotonic_before"].min())),
        ("from_first_module_load", float(rec.modules["load_monotonic_ns"].min()) if len(rec.modules) else None),
        ("from_tool_start", float(rec.run.start_monotonic_ns) if rec.run else None),
    ):
        if start is None:
            continue
        over = ends - (burst + budget * np.maximum(t - start, 0) / 1e9)
        worst = int(np.argmax(over))
        out[name] = {
            "most_over_mib": round(float(over[worst]) / 2**20, 2),  # negative: always under
            "at_s": round((t[worst] - start) / 1e9, 2),
            "at_flush": worst,
            "last_over_mib": round(float(over[-1]) / 2**20, 2),
        }
    half = len(t) // 2
    out["second_half_mib_per_s"] = round(float(ends[-1] - ends[half]) / 2**20 / ((t[-1] - t[half]) / 1e9), 3)
    out["budget_mib_per_s"] = round(budget / 2**20, 3)
    return out


def accounting(path: Path) -> dict:
    """The recording's accounting from its metadata (flushes, sampling, launch counts):
    every flush's records, drops and sampled-out blocks against what it counted."""
    from gpuobs.analysis.launches import counted_by_flush as counted_by_flush_of
    from gpuobs.record.finish import read_without_events
    from gpuobs.recording_file import schema

    rec, events = read_without_events(path)
    flushes = rec.flushes
    sampled = {(int(s["device_index"]), int(s["flush_seq"])): int(s["sampled_out"]) for s in rec.sampling}
    counted_by_flush = counted_by_flush_of(rec)
    # Modes that record blocks sample them; a counting mode records nothing to sample.
    block_mode = rec.run is not None and schema.mode_has(rec.run.mode_name, schema.Trait.BLOCK_RECORDS)
    unbalanced, uncounted = [], []
    for f in flushes:
        key = (int(f["device_index"]), int(f["flush_seq"]))
        if int(f["attempted"]) != int(f["recorded"]) + int(f["dropped"]):
            unbalanced.append(key)
        counted = counted_by_flush.get(key, 0) + int(f["unattributed"])
        if block_mode and int(f["attempted"]) + sampled.get(key, 0) != counted:
            uncounted.append(key)
    totals = rec.totals
    # The budget is a rate over the recording: from its first module load (the first
    # moment a record can be written: the sampler's bucket started before it, full, at
    # the context's setup, which the tool does before it patches the context's first
    # module) to its last flush. Longer than the soak's timed loop by the model's build,
    # the warm-up steps and the exit. (The first clock sample, taken at the first flush,
    # is later: from it the allowance leaves out seconds the bucket was filling.)
    span_s = 0.0
    starts = [int(rec.modules["load_monotonic_ns"].min())] if len(rec.modules) else []
    starts += [int(rec.clock_samples["monotonic_before"].min())] if len(rec.clock_samples) else []
    if len(flushes) and starts:
        span_s = (int(flushes["host_time_ns"].max()) - starts[0]) / 1e9
    budget = int(rec.sampling["budget_bytes_per_s"][-1]) if len(rec.sampling) else 0
    burst = int(rec.sampling["burst_bytes"][-1]) if len(rec.sampling) else 0
    return {
        "budget_curve": budget_curve(path, rec, budget, burst),
        "complete": bool(rec.complete),
        "flushes": len(flushes),
        "flushes_unbalanced": len(unbalanced),
        "flushes_counted_apart": len(uncounted),
        "first_apart": uncounted[:3],
        "counted": sum(counted_by_flush.values()) + totals["unattributed"],
        "attempted": totals["attempted"],
        "recorded": totals["recorded"],
        "dropped": totals["dropped"],
        "sampled_out": totals["sampled_out"],
        "events_in_file": events,
        "recording_span_s": round(span_s, 2),
        "budget_bytes_per_s": budget,
        "burst_bytes": burst,
    }


def summarise(run: Run, args) -> dict:
    rows = run.rows
    after = [r for r in rows if r["t"] > args.warmup] or rows
    if not after:
        return {"run": run.name, "error": f"no rows logged; exit {run.returncode}, see {run.stderr_path}"}
    first, last = after[0], after[-1]
    duration = rows[-1]["t"]
    size_mb = run.recording.stat().st_size / 2**20 if run.recording.is_file() else 0.0
    out = {
        "run": run.name,
        "exit": run.returncode,
        "duration_s": duration,
        "steps": rows[-1]["steps"],
        "step_ms_first_last_max": [first["step_ms"], last["step_ms"], max(r["step_ms"] for r in after)],
        "rss_mb_first_last_max": [first["rss_mb"], last["rss_mb"], max(r["rss_mb"] for r in after)],
        "rss_growth": round((last["rss_mb"] - first["rss_mb"]) / first["rss_mb"], 4),
        "gpu_mb_first_last": [first["gpu_mb"], last["gpu_mb"]],
        "file_mb": round(size_mb, 1),
        "file_mb_per_s": round(size_mb / max(duration, 1e-9), 2),
        "finish_s": round(run.done_time - run.exit["exit_time"], 2) if run.exit else None,
        "finish_parts_s": run.finish_parts(),
    }
    try:
        out.update(accounting(run.recording))
    except Exception as exc:  # a recording that cannot be read is a result, not a crash of the soak
        out["accounting_error"] = str(exc)[:500]
    budget = out.get("budget_bytes_per_s", 0)
    span = out.get("recording_span_s") or duration
    allowed_mb = (budget * span + out.get("burst_bytes", 0)) / 2**20 if budget else None
    out["file_allowed_mb"] = round(allowed_mb, 1) if allowed_mb else None
    curve = (out.get("budget_curve") or {}).get("from_first_module_load")
    out["checks"] = {
        "rss_flat": abs(out["rss_growth"]) <= RSS_FLAT,
        # at the end, and at every flush before it
        "file_within_budget": (allowed_mb is None or size_mb <= allowed_mb)
        and (curve is None or curve["most_over_mib"] <= 0),
        "every_flush_adds_up": out.get("flushes_unbalanced") == 0 and out.get("flushes_counted_apart") == 0,
        "complete": out.get("complete", False),
        "exit_0": run.returncode == 0,
    }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=RUNS, help="MODE:LOOP,... (LOOP b2b or sync)")
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--every", type=float, default=20)
    p.add_argument("--warmup", type=float, default=60)
    p.add_argument("--chunk", type=int, default=50, help="b2b: replays between synchronisations")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--parallel", action="store_true", help="every run at once on the one GPU")
    p.add_argument("--record-args", default="", help='more record options for every run ("--pack-metadata none")')
    p.add_argument("--workdir", default="", help="recordings and logs (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the recordings (each can be the budget's ~10 GB)")
    p.add_argument("--json", default="", help="write the summaries here")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--loop", default="sync", choices=("b2b", "sync"))
    args = p.parse_args()
    if args.worker:
        return worker(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpuobs-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    specs = [s for s in args.runs.split(",") if s]
    runs, summaries = [], []
    for spec in specs:
        run = Run(spec, args, workdir)
        runs.append(run)
        if not args.parallel:
            run.wait()
    for run in runs:
        if args.parallel:
            run.wait()
    for run in runs:
        s = summarise(run, args)
        summaries.append(s)
        print("SOAK_SUMMARY " + json.dumps(s), flush=True)
        if run.recording.exists() and not args.keep:
            run.recording.unlink()
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=1))
    print(
        f"\n{'run':<20} {'min':>5} {'step ms first/last/max':>24} {'RSS MB first/last':>18} {'GPU MB':>13} "
        f"{'file MB':>8} {'allowed':>8} {'recorded':>11} {'dropped':>10} {'sampled out':>12} {'flushes':>8} ok"
    )
    for s in summaries:
        if "error" in s:
            print(f"{s['run']:<20} {s['error']}")
            continue
        sm = s["step_ms_first_last_max"]
        print(
            f"{s['run']:<20} {s['duration_s'] / 60:5.1f} {sm[0]:7.3f}/{sm[1]:7.3f}/{sm[2]:7.3f} "
            f"{s['rss_mb_first_last_max'][0]:8.0f}/{s['rss_mb_first_last_max'][1]:<8.0f} "
            f"{s['gpu_mb_first_last'][0]:6.0f}/{s['gpu_mb_first_last'][1]:<6.0f} {s['file_mb']:8.0f} "
            f"{s['file_allowed_mb'] or 0:8.0f} {s.get('recorded', 0):11,} {s.get('dropped', 0):10,} "
            f"{s.get('sampled_out', 0):12,} {s.get('flushes', 0):8,} {all(s['checks'].values())}"
        )
    sys.exit(0 if all(all(s.get("checks", {"ran": False}).values()) for s in summaries) else 1)


if __name__ == "__main__":
    main()
