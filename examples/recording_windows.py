"""Recording windows: record only part of a run, CUDA graphs included.

    gpuobs record --mode block_trace --paused -- python examples/recording_windows.py

Every kernel stays patched; outside `with gpuobs.window():` the patches find the
context's record gate closed and return at once (gpuobs counts the launches on the
host, nothing more). Inside, every block is recorded, counts exact. Graphs follow
the windows whenever they were captured: before any window, inside one, or between
two, a replay is recorded exactly when it runs inside a window. Prints one JSON
line: what ran where, and what each resume and pause cost on the host.
"""

import json
import time

import torch

import gpuobs


def capture(op):
    """One CUDA graph of `op`, captured on a side stream as torch wants."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        op()
    torch.cuda.current_stream().wait_stream(side)
    return graph


def main():
    x = torch.randn(1 << 22, device="cuda")
    ran = {"in": 0, "out": 0, "replays_in": 0, "replays_out": 0, "toggles_ms": []}

    def step(inside):
        x.mul_(1.0001)
        ran["in" if inside else "out"] += 1

    def replay(graph, inside):
        graph.replay()
        ran["replays_in" if inside else "replays_out"] += 1

    for _ in range(3):  # before any window
        step(False)
    before = capture(lambda: x.add_(1.0))  # captured before any window
    replay(before, False)
    for _ in range(2):
        t0 = time.perf_counter()
        with gpuobs.window():
            for _ in range(3):
                step(True)
        ran["toggles_ms"].append(round((time.perf_counter() - t0) * 1e3, 3))
        for _ in range(4):
            step(False)

    with gpuobs.window():
        replay(before, True)
        inside = capture(lambda: x.add_(2.0))  # captured inside a window, replayed across it
        replay(inside, True)
    replay(before, False)
    replay(inside, False)
    between = capture(lambda: x.add_(3.0))  # captured between windows
    replay(between, False)
    with gpuobs.window():
        for graph in (before, inside, between):
            replay(graph, True)
        step(True)
    replay(between, False)
    torch.cuda.synchronize()
    print(json.dumps(ran))


if __name__ == "__main__":
    main()
