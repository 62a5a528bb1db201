"""The workloads of the overhead ladder, timed inside one process (one mode).

Prints one JSON object: workload -> {"ms": median device ms, ...}. Device time
comes from CUDA events around each repetition, after warm-up; inputs are larger
than the 60 MB L2 where the workload allows it."""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "examples" / "closed_binary"))


# Recording windows (GPUOBS_BENCH_WINDOW=N, under `gpuobs record --paused`): one
# repetition in N runs inside a window; the result is the mean over all
# repetitions (what a run pays on average), the parts go to WINDOW_DETAILS.
WINDOW = int(os.environ.get("GPUOBS_BENCH_WINDOW", "0"))
WINDOW_DETAILS = {}


def device_ms(fn, reps, warmup=3, name=""):
    if WINDOW:
        import gpuobs  # installed, or the checkout's exporter/ (on sys.path above)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times, inside, toggles = [], [], []
    for i in range(reps):
        in_window = WINDOW > 0 and i % WINDOW == 0
        if in_window:
            t0 = time.perf_counter()
            gpuobs.resume()
            toggles.append(time.perf_counter() - t0)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()  # a sync per repetition, as a real loop reading results would
        times.append(a.elapsed_time(b))
        inside.append(in_window)
        if in_window:
            t0 = time.perf_counter()
            gpuobs.pause()
            toggles[-1] += time.perf_counter() - t0
    if not WINDOW:
        return statistics.median(times)
    WINDOW_DETAILS[name] = {
        "in_ms": statistics.median([t for t, w in zip(times, inside) if w]),
        "out_ms": statistics.median([t for t, w in zip(times, inside) if not w] or [float("nan")]),
        "toggle_host_ms": statistics.median(toggles) * 1e3,
    }
    return statistics.mean(times)


def silu_closed(reps):
    import run_silu_mul

    lib = run_silu_mul.library()
    x = torch.randn(6098, 2 * 17408, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(6098, 17408, device="cuda", dtype=torch.bfloat16)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    return device_ms(
        lambda: lib.silu_and_mul(ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(x.data_ptr()), 6098, 17408, stream),
        reps,
        name="silu_closed_binary",
    )


def cublas(reps):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    return device_ms(lambda: a @ b, reps, name="cublas_4096_bf16")


def torch_silu(reps):
    x = torch.randn(6098, 17408, device="cuda", dtype=torch.bfloat16)
    y = torch.randn_like(x)
    return device_ms(lambda: F.silu(x) * y, reps, name="torch_silu_mul")


def sdpa(reps):
    q = torch.randn(8, 16, 2048, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    return device_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps, name="sdpa")


def decode_graph(reps):
    import decode_graph as dg

    model, tokens, pos = dg.build(layers=4)
    graph, _ = dg.capture(model, tokens, pos)
    return device_ms(graph.replay, reps, name="decode_step_graph")


def transformer_layer_graph(reps):
    """A bf16 TransformerEncoderLayer (8 x 512 x 1024, 16 heads) replayed from a CUDA graph."""
    layer = torch.nn.TransformerEncoderLayer(
        1024, 16, 4096, batch_first=True, device="cuda", dtype=torch.bfloat16
    ).eval()
    x = torch.randn(8, 512, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                layer(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            layer(x)
    return device_ms(graph.replay, reps, name="transformer_layer_graph")


def empty_launches(reps):
    """Host microseconds per launch of an empty kernel (10,000 back to back)."""
    import run_silu_mul

    lib = run_silu_mul.library()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    lib.launch_empty(100, stream)
    torch.cuda.synchronize()
    samples = []
    for _ in range(max(3, reps // 4)):
        t0 = time.perf_counter()
        lib.launch_empty(10_000, stream)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / 10_000 * 1e6)
    return statistics.median(samples)


WORKLOADS = {
    "silu_closed_binary": silu_closed,
    "cublas_4096_bf16": cublas,
    "torch_silu_mul": torch_silu,
    "sdpa": sdpa,
    "decode_step_graph": decode_graph,
    "transformer_layer_graph": transformer_layer_graph,
    "empty_launch_us": empty_launches,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--only", default="")
    args = p.parse_args()
    results = {}
    for name, fn in WORKLOADS.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            results[name] = fn(args.reps)
        except Exception as exc:  # a failed workload is reported, not hidden
            results[name] = f"error: {type(exc).__name__}: {exc}"
        torch.cuda.synchronize()
    if WINDOW_DETAILS:
        results["_windows"] = WINDOW_DETAILS
    print("GPUOBS_BENCH " + json.dumps(results))


if __name__ == "__main__":
    main()
