"""What each device patch compiles to, per architecture: instructions, registers
touched, and every memory operation in order (loads, stores, atomics with and
without a return). A patch's cost on the GPU is mostly its round trips to L2
(loads and returning atomics the warp waits for) and contended lines; this shows
them without a GPU. Needs nvcc and cuobjdump (CUDA toolkit, or the
nvidia-cuda-cuobjdump wheel).

    python benchmarks/patch_sass.py --arch 90
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuobs.record.native_build import find_toolchain, patch_compile_command

MEMORY_OPS = re.compile(r"\b(LDG|STG|LD|ST|ATOMG|ATOM|REDG|RED|LDS|STS|ATOMS|MEMBAR|QSPC|CCTL)\b[\w.]*")
INSTRUCTION = re.compile(r"/\*[0-9a-f]{4}\*/\s+([^;]*);")


def sass(arch: str) -> str:
    tc = find_toolchain()
    cuobjdump = shutil.which("cuobjdump") or str(Path(tc.nvcc).parent / "cuobjdump")
    if not Path(cuobjdump).exists():
        sys.exit("cuobjdump not found: install the CUDA toolkit's, or `pip install nvidia-cuda-cuobjdump`")
    with tempfile.TemporaryDirectory() as tmp:
        fatbin = Path(tmp) / "p.fatbin"
        subprocess.run(patch_compile_command(tc, fatbin, archs=(arch,)), check=True)
        return subprocess.run([cuobjdump, "-sass", str(fatbin)], check=True, capture_output=True, text=True).stdout


def report(text: str) -> list[dict]:
    rows = []
    for part in re.split(r"\n\s+Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        ins = [i.strip() for i in INSTRUCTION.findall(part) if not i.strip().startswith("NOP")]
        regs = {int(r) for r in re.findall(r"\bR(\d+)\b", part)}
        mem = [i for i in ins if MEMORY_OPS.search(i)]
        waits = [i for i in mem if re.match(r"(@!?P\d+ )?(LDG|LD|ATOMG|ATOM)\b", i)]
        # Stack stores/loads: registers the patch saves and restores on every call.
        stack = [i for i in ins if re.match(r"(@!?P\d+ )?(STL|LDL)\b", i)]
        rows.append(
            {
                "function": name,
                "instructions": len(ins),
                "max_register": max(regs, default=-1),
                "memory": mem,
                "round_trips": len(waits),
                "stack_ops": len(stack),
                "calls": sum(1 for i in ins if i.startswith("CALL")),
            }
        )
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="90", help="SM architecture, e.g. 90 for H100/H200")
    args = p.parse_args()
    for r in report(sass(args.arch)):
        print(
            f"{r['function']}: {r['instructions']} instructions, registers up to R{r['max_register']}, "
            f"{r['round_trips']} load/returning-atomic (the warp waits on these), "
            f"{r['stack_ops']} stack stores/loads, {r['calls']} calls"
        )
        for op in r["memory"]:
            print(f"    {op}")


if __name__ == "__main__":
    main()
