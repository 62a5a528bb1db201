"""A server shaped like vLLM's process model, for tests/test_gpu_server.py.

* parent: never touches CUDA (vLLM's API server). Starts the engine with
  multiprocessing (--start spawn or forkserver), waits until it served --steps
  steps, then stops it with SIGTERM and waits for it.
* engine: never touches CUDA either (vLLM's engine core with the multiprocess
  executor). Starts two workers the same way, broadcasts each step's input over a
  shared-memory ring and waits for both workers' answers there. On SIGTERM (a
  handler that raises SystemExit, as vLLM's) it stops its workers with SIGTERM.
  --strip-preload: it removes LD_PRELOAD from its environment before starting them,
  as frameworks that override LD_PRELOAD for their children do.
* worker (two): captures one CUDA graph of small kernels (torch.cuda.CUDAGraph),
  replays it once per step, writes its answer into the ring. On SIGTERM it exits
  through SystemExit, so CUDA and the recording close normally.

Each process writes what it did to --out-dir/<role>.json: its pid, role, how many
graph replays it made and the graph's kernels (so the test knows what to expect).
    python3 graph_server.py --start spawn --steps 50 --out-dir DIR [--strip-preload]
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing as mp
import os
import signal
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

WORKERS = 2
SLOTS = 4  # ring slots: the engine may run this many steps ahead of the slowest reader
HIDDEN = 256  # the graph's tensors: (HIDDEN, HIDDEN) float32


class ShmRing:
    """One writer, WORKERS readers, SLOTS slots in one shared-memory block (vLLM's
    MessageQueue idea, minimal): per slot the step it holds, its value, and per reader
    the last step it read and its answer. Polled with short sleeps; x86 orders the
    stores, and every field is one aligned 8-byte word."""

    def __init__(self, name: str | None = None):
        import numpy as np

        words = SLOTS * 2 + WORKERS * 2
        self.shm = self.mapped = None
        if name is None:
            self.shm = shared_memory.SharedMemory(create=True, size=words * 8)
            buf, self.name = self.shm.buf, self.shm.name
        else:  # mapped directly: attaching through SharedMemory registers the block with a tracker again
            fd = os.open(f"/dev/shm/{name.lstrip('/')}", os.O_RDWR)
            self.mapped = mmap.mmap(fd, words * 8)
            os.close(fd)
            buf, self.name = self.mapped, name
        self.words = np.ndarray((words,), np.int64, buffer=buf)
        if name is None:
            self.words[:] = -1

    def slot(self, step: int) -> int:
        return 2 * (step % SLOTS)

    def answer_at(self, reader: int) -> int:
        return 2 * SLOTS + 2 * reader

    def put(self, step: int, value: int) -> None:
        s = self.slot(step)
        self.words[s + 1] = value
        self.words[s] = step  # last: a reader that sees the step sees the value

    def get(self, step: int) -> int:
        s = self.slot(step)
        while self.words[s] != step:
            time.sleep(0.0002)
        return int(self.words[s + 1])

    def answer(self, reader: int, step: int, value: int) -> None:
        a = self.answer_at(reader)
        self.words[a + 1] = value
        self.words[a] = step

    def answered(self, reader: int, step: int) -> int | None:
        a = self.answer_at(reader)
        return int(self.words[a + 1]) if self.words[a] == step else None

    def close(self, unlink: bool = False) -> None:
        del self.words
        if self.mapped is not None:
            self.mapped.close()
            return
        self.shm.close()
        if unlink:
            self.shm.unlink()


def _exit_on_sigterm() -> None:
    def handler(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handler)


def _report(out_dir: str, role: str, **what) -> None:
    path = Path(out_dir) / f"{role}.json"
    path.write_text(json.dumps({"pid": os.getpid(), "role": role, "argv": sys.argv, **what}))


def cpu_worker(rank: int, ring: ShmRing, out_dir: str) -> None:
    """--cpu: the same process model and ring without CUDA (to check it where no GPU is)."""
    replays = 0
    try:
        step = 0
        while True:
            value = ring.get(step)
            replays += 1
            ring.answer(rank, step, value * 2)
            step += 1
    finally:
        _report(out_dir, f"worker{rank}", replays=replays, state="stopped")
        ring.close()


def worker_main(rank: int, ring_name: str, out_dir: str, cpu: bool = False) -> None:
    _exit_on_sigterm()
    role = f"worker{rank}"
    ring = ShmRing(ring_name)
    if cpu:
        return cpu_worker(rank, ring, out_dir)
    import torch

    x = torch.zeros(HIDDEN, HIDDEN, device="cuda")
    w = torch.full((HIDDEN, HIDDEN), 1.0 / HIDDEN, device="cuda")
    out = torch.zeros(1, device="cuda")

    def step_body():  # small kernels: fill-add, tanh, matmul, sum
        y = torch.tanh(x + 1.0)
        z = y @ w
        out.copy_(z.sum(dim=1).mean().reshape(1))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up (cuBLAS picks its kernel) before capture, as torch's docs say
            step_body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step_body()
    torch.cuda.synchronize()
    replays = 0
    _report(out_dir, role, replays=replays, state="ready")
    try:
        step = 0
        while True:
            value = ring.get(step)
            x.fill_(float(value % 7))  # a plain launch between replays, as inputs are copied in
            graph.replay()
            replays += 1
            answer = int(round(float(out.item()) * 1000))  # item() synchronises
            ring.answer(rank, step, answer)
            _report(out_dir, role, replays=replays, state="serving")
            step += 1
    finally:
        torch.cuda.synchronize()
        _report(out_dir, role, replays=replays, state="stopped")
        ring.close()


def engine_main(start: str, steps: int, strip_preload: bool, out_dir: str, served, cpu: bool = False) -> None:
    _exit_on_sigterm()
    ctx = mp.get_context(start)
    ring = ShmRing()
    if strip_preload:
        os.environ.pop("LD_PRELOAD", None)
    workers = [
        ctx.Process(target=worker_main, args=(r, ring.name, out_dir, cpu), name=f"worker{r}") for r in range(WORKERS)
    ]
    for p in workers:
        p.start()
    _report(out_dir, "engine", workers=[p.pid for p in workers], start=start, strip_preload=strip_preload)
    try:
        for step in range(steps):
            ring.put(step, step)
            while any(ring.answered(r, step) is None for r in range(WORKERS)):
                if any(not p.is_alive() for p in workers):
                    raise RuntimeError("a worker died")
                time.sleep(0.0002)
        served.set()
        while True:  # idle serving until SIGTERM: the workers wait in the ring
            time.sleep(0.01)
    finally:
        for p in workers:  # vLLM's shutdown: SIGTERM, then wait, then kill
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        for p in workers:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
        _report(out_dir, "engine", workers=[p.pid for p in workers], exitcodes=[p.exitcode for p in workers])
        ring.close(unlink=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", choices=["spawn", "forkserver"], default="spawn")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--strip-preload", action="store_true")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--cpu", action="store_true", help="workers without CUDA (checks the process model only)")
    args = ap.parse_args()
    ctx = mp.get_context(args.start)
    served = ctx.Event()
    engine = ctx.Process(
        target=engine_main,
        args=(args.start, args.steps, args.strip_preload, args.out_dir, served, args.cpu),
        name="engine",
    )
    engine.start()
    if not served.wait(120):
        engine.kill()
        print("the engine did not serve its steps in 120 s", file=sys.stderr)
        return 1
    os.kill(engine.pid, signal.SIGTERM)
    engine.join(60)
    if engine.is_alive():
        engine.kill()
        return 1
    _report(args.out_dir, "parent", engine=engine.pid, engine_exit=engine.exitcode)
    return 0 if engine.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
