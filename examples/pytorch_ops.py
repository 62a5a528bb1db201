"""PyTorch's kernel families under gpuobs: a cuBLAS matmul (nvjet/cutlass SASS from
a closed library), an elementwise silu*mul, SDPA attention, and a CUDA graph
replayed 20 times. Checks its own results, prints what it ran as JSON.

    gpuobs record --mode block_trace -- python examples/pytorch_ops.py
    gpuobs export -o trace.pftrace && gpuobs stats
"""

import json

import torch
import torch.nn.functional as F


def main():
    torch.manual_seed(0)
    dev = "cuda"
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    c = a @ b
    ref = a[:64].double() @ b.double()
    mm_err = ((c[:64].double() - ref).norm() / ref.norm()).item()

    x = torch.randn(6098, 17408, device=dev, dtype=torch.bfloat16)
    y = torch.randn(6098, 17408, device=dev, dtype=torch.bfloat16)
    z = F.silu(x) * y

    q = torch.randn(8, 16, 1024, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn_like(q)
    v = torch.randn_like(q)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    static_in = torch.randn(512, 512, device=dev, dtype=torch.bfloat16)
    w = torch.randn(512, 512, device=dev, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            static_out = F.silu(static_in @ w) * 0.5
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = F.silu(static_in @ w) * 0.5
    replays = 20
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    graph_err = (
        (static_out.float() - F.silu(static_in.float() @ w.float()) * 0.5).norm() / static_out.float().norm()
    ).item()
    print(
        json.dumps(
            {
                "mm_rel_error": mm_err,
                "graph_rel_error": graph_err,
                "replays": replays,
                "finite": bool(torch.isfinite(z).all() and torch.isfinite(o).all()),
            }
        )
    )
    assert mm_err < 2e-2 and graph_err < 2e-2


if __name__ == "__main__":
    main()
