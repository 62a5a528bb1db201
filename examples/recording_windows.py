"""Recording windows: instrument only part of a run, the rest at native speed.

    gpuobs record --mode block_trace --paused -- python examples/recording_windows.py

Outside `with gpuobs.window():` every kernel runs its original code (gpuobs
counts the launches, nothing more); inside, every kernel is patched and every
block recorded, counts exact. Windows turn only while no CUDA graph is
instantiated: a graph keeps the code its kernels had when it was instantiated,
so gpuobs refuses (WindowError) rather than patch under it. Prints one JSON
line: what ran where, and what each resume and pause cost on the host.
"""

import json
import time

import torch

import gpuobs
from gpuobs.record.runtime import WindowError


def main():
    x = torch.randn(1 << 22, device="cuda")
    ran = {"in": 0, "out": 0, "toggles_ms": [], "refused_with_a_graph": False}

    def step(inside):
        x.mul_(1.0001)
        ran["in" if inside else "out"] += 1

    for _ in range(3):  # before any window
        step(False)
    for _ in range(2):
        t0 = time.perf_counter()
        with gpuobs.window():
            for _ in range(3):
                step(True)
        ran["toggles_ms"].append(round((time.perf_counter() - t0) * 1e3, 3))
        for _ in range(4):
            step(False)

    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    graph.replay()
    try:
        gpuobs.resume()
    except WindowError as exc:
        ran["refused_with_a_graph"] = True
        print(f"as expected: {exc}")
    graph.reset()  # destroys the instantiated graph: windows turn again
    with gpuobs.window():
        step(True)
    torch.cuda.synchronize()
    print(json.dumps(ran))


if __name__ == "__main__":
    main()
