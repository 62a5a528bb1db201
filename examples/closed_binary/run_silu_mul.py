"""Loads libsilu_mul.so with ctypes (no source needed at run time) and runs the
vLLM-shaped SiluAndMul: 6,098 tokens, 17,408 bf16 per half.

    gpuobs record --mode block_trace -- python examples/closed_binary/run_silu_mul.py
"""

import argparse
import ctypes
import json
import subprocess
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def library() -> ctypes.CDLL:
    lib = HERE / "libsilu_mul.so"
    src = HERE / "silu_mul.cu"
    if not lib.exists() or lib.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(
            [
                "nvcc",
                "-O3",
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-gencode",
                "arch=compute_90,code=sm_90",
                "-gencode",
                "arch=compute_80,code=sm_80",
                "-o",
                str(lib),
                str(src),
            ],
            check=True,
        )
    return ctypes.CDLL(str(lib))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=6098)
    p.add_argument("--d", type=int, default=17408)
    p.add_argument("--iters", type=int, default=3)
    args = p.parse_args()
    lib = library()
    torch.manual_seed(0)
    x = torch.randn(args.tokens, 2 * args.d, device="cuda", dtype=torch.bfloat16)
    out = torch.full((args.tokens, args.d), float("nan"), device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(args.iters):
        rc = lib.silu_and_mul(
            ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(x.data_ptr()), args.tokens, args.d, ctypes.c_void_p(stream)
        )
        assert rc == 0, f"launch failed: {rc}"
    torch.cuda.synchronize()
    xf = x.float()
    ref = torch.nn.functional.silu(xf[:, : args.d]) * xf[:, args.d :]
    err = ((out.float() - ref).norm() / ref.norm()).item()
    print(
        json.dumps(
            {
                "launches": args.iters,
                "blocks": args.tokens,
                "accesses_per_launch": args.tokens * (args.d // 8) * 3,
                "rel_error": err,
            }
        )
    )
    assert err < 1e-2, f"wrong result: relative error {err}"


if __name__ == "__main__":
    main()
