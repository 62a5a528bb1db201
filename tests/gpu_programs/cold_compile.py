"""A heavy PyTorch program with a cold compile cache: torch.compile with
max-autotune (inductor benchmarks Triton GEMM templates and picks one), a
hand-written Triton kernel, and a cuDNN convolution, all in one process. The
caches point at a fresh folder, so every run compiles and autotunes from cold.

    python cold_compile.py [CACHE_DIR]

Prints one JSON line: wall seconds, and the device memory in use at the end
(total - free, so a tool's buffers show as the difference between two runs)."""

import json
import os
import sys
import tempfile
import time

cache = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gpuobs-cold-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + tl.load(y_ptr + offs, mask=mask), mask=mask)


def mlp(x, w1, w2):
    return torch.nn.functional.gelu(x @ w1) @ w2


def main():
    t0 = time.perf_counter()
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(512, 1024, device=dev, dtype=torch.float16)
    w1 = torch.randn(1024, 2048, device=dev, dtype=torch.float16)
    w2 = torch.randn(2048, 1024, device=dev, dtype=torch.float16)
    compiled = torch.compile(mlp, mode="max-autotune-no-cudagraphs")
    y = compiled(x, w1, w2)
    y = compiled(x, w1, w2)
    n = 1 << 22
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    out = torch.empty_like(a)
    scale_add[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
    img = torch.randn(16, 64, 56, 56, device=dev, dtype=torch.float16)
    conv = torch.nn.Conv2d(64, 128, 3, padding=1).to(dev, torch.float16)
    torch.backends.cudnn.benchmark = True
    z = conv(img)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    print(
        json.dumps(
            {
                "wall_s": time.perf_counter() - t0,
                "device_used_bytes": total - free,
                "check": float(y.float().abs().mean() + out.abs().mean() + z.float().abs().mean()),
            }
        )
    )


if __name__ == "__main__":
    main()
