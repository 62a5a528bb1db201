"""A small PyTorch program to run twice: once under gpuobs (with its own CUDA API
trace) and once, uninstrumented, under the PyTorch profiler. Exporting both into
one trace shows the instrumented device timeline next to the profiler's, with
each kernel's uninstrumented duration and the instrumentation's cost.

    gpuobs record --api-trace -o api.gpuobs -- python examples/side_by_side.py
    python examples/side_by_side.py --profile profiler.json
    gpuobs export api.gpuobs --host profiler.json -o trace.pftrace

Deterministic: the same kernels with the same grids, in the same order, every run.
"""

import argparse
import json

import torch
import torch.nn.functional as F


def workload(dev: str) -> dict:
    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    c = a @ b
    x = torch.randn(512, 2048, device=dev, dtype=torch.bfloat16)
    z = F.silu(x) * x
    q = torch.randn(2, 8, 256, 64, device=dev, dtype=torch.bfloat16)
    o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    w = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    static_in = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            static_out = F.silu(static_in @ w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = F.silu(static_in @ w)
    replays = 3
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return {
        "replays": replays,
        "finite": bool(
            torch.isfinite(c).all()
            and torch.isfinite(z).all()
            and torch.isfinite(o).all()
            and torch.isfinite(static_out).all()
        ),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--profile", help="run under the PyTorch profiler and write its Chrome-JSON trace here")
    args = p.parse_args()
    workload("cuda")  # warm-up: lazy module loads and cuBLAS handles stay out of the measured run
    torch.cuda.synchronize()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            ran = workload("cuda")
        prof.export_chrome_trace(args.profile)
    else:
        ran = workload("cuda")
    print(json.dumps(ran))


if __name__ == "__main__":
    main()
