"""Recording windows: instrument only part of a run, the rest at native speed.

    gpuobs record --mode block_trace --paused -- python examples/recording_windows.py

Outside `with gpuobs.window():` every kernel runs its original code (gpuobs
counts the launches, nothing more); inside, every kernel is patched and every
block recorded. Eager launches and CUDA-graph replays both follow the window,
including graphs captured outside it. Prints one JSON line: what ran where, and
what each pause and resume cost on the host.
"""
import json
import time

import torch

import gpuobs


def timed(fn):
    t0 = time.perf_counter()
    changed = fn()
    return changed, (time.perf_counter() - t0) * 1e3


def main():
    x = torch.randn(1 << 22, device="cuda")
    ran = {"eager_in": 0, "eager_out": 0, "replays_in": 0, "replays_out": 0, "toggles_ms": []}

    def eager(inside):
        x.mul_(1.0001)
        ran["eager_in" if inside else "eager_out"] += 1

    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.add_(1.0)  # warm-up outside the capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=s):  # captured while paused
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)

    def replay(inside):
        graph.replay()
        ran["replays_in" if inside else "replays_out"] += 1

    for _ in range(3):  # before any window
        eager(False)
        replay(False)
    for _ in range(2):
        changed, ms = timed(gpuobs.resume)
        ran["toggles_ms"].append(round(ms, 3))
        for _ in range(3):
            eager(True)
            replay(True)
        changed, ms = timed(gpuobs.pause)
        ran["toggles_ms"].append(round(ms, 3))
        for _ in range(4):
            eager(False)
            replay(False)
    torch.cuda.synchronize()
    print(json.dumps(ran))


if __name__ == "__main__":
    main()
