"""A heavy PyTorch program with a cold compile cache: a torch.compile'd block
(inductor generates Triton reduction and pointwise kernels and autotunes their
configs, timing each), a hand-written Triton kernel, and a cuDNN convolution
(benchmark mode: cuDNN times its algorithms), all in one process. The caches
point at a fresh folder, so every run compiles and autotunes from cold.
--max-autotune compiles with mode="max-autotune-no-cudagraphs" instead
(inductor also benchmarks Triton GEMM templates: thousands of timed launches).

    python cold_compile.py [CACHE_DIR] [--max-autotune]

Prints one JSON line: wall seconds, and the device memory in use at the end
(total - free, so a tool's buffers show as the difference between two runs)."""

import json
import os
import sys
import tempfile
import time

args = [a for a in sys.argv[1:] if not a.startswith("--")]
MAX_AUTOTUNE = "--max-autotune" in sys.argv[1:]
cache = args[0] if args else tempfile.mkdtemp(prefix="gpuobs-cold-")
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


def block(x, w1, w2, gamma):
    h = torch.nn.functional.layer_norm(x, x.shape[-1:], gamma)
    h = torch.nn.functional.gelu(h @ w1) @ w2
    return torch.softmax(h.float(), dim=-1).to(x.dtype) + x


def main():
    t0 = time.perf_counter()
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(512, 1024, device=dev, dtype=torch.float16)
    w1 = torch.randn(1024, 2048, device=dev, dtype=torch.float16)
    w2 = torch.randn(2048, 1024, device=dev, dtype=torch.float16)
    gamma = torch.ones(1024, device=dev, dtype=torch.float16)
    compiled = torch.compile(block, mode="max-autotune-no-cudagraphs" if MAX_AUTOTUNE else None)
    y = compiled(x, w1, w2, gamma)
    y = compiled(x, w1, w2, gamma)
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
