"""What the sanitizer wrapped around each patch point, from a patched-code dump.

    GPUOBS_DUMP_PATCHED_CODE=dump gpuobs record --mode block_trace_noop -- python app.py
    python benchmarks/trampolines.py dump [--arch SM90]

For every dumped function: each jump out of its code (a patched EXIT or
instruction) and the trampoline it lands in, with that trampoline's instruction
count, local-memory stores and loads, calls and warp syncs, and the same for
each sanitizer helper it calls. Needs nvdisasm (the CUDA toolkit's, or
`pip install nvidia-cuda-nvdisasm`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LINE = re.compile(r"/\*([0-9a-f]+)\*/\s+(.*?)\s*;?\s*$")
ABS_TARGET = re.compile(r"\b(JMP|CALL\.ABS\.NOINC)\s+0x([0-9a-f]+)")


@dataclass
class Block:
    """A straight run of code: a trampoline (to its exit or jump back) or a helper (to its RET)."""

    address: int
    instructions: int = 0
    local_stores: int = 0
    local_loads: int = 0
    warp_syncs: int = 0
    calls: list = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.instructions} instructions, {self.local_stores} STL, {self.local_loads} LDL, "
            f"{self.warp_syncs} WARPSYNC, {len(self.calls)} calls"
        )


def instructions(sass: str) -> list[tuple[int, str]]:
    return [(int(m.group(1), 16), m.group(2)) for m in map(LINE.search, sass.splitlines()) if m]


def jumps_out(sass: str) -> list[int]:
    """Absolute JMP targets outside the disassembled function itself."""
    code = instructions(sass)
    end = code[-1][0] + 16 if code else 0
    return [
        int(m.group(2), 16)
        for _, text in code
        for m in [ABS_TARGET.search(text)]
        if m and m.group(1) == "JMP" and not 0 <= int(m.group(2), 16) < end
    ]


def walk(sass: str, stop_at_ret: bool) -> Block:
    """Summarises code from its first instruction to the first EXIT, JMP or RET."""
    code = instructions(sass)
    block = Block(code[0][0] if code else 0)
    for _, text in code:
        op = text.split()[0] if not text.startswith("@") else text.split()[1]
        block.instructions += 1
        block.local_stores += op.startswith("STL")
        block.local_loads += op.startswith("LDL")
        block.warp_syncs += op.startswith("WARPSYNC")
        m = ABS_TARGET.search(text)
        if m and m.group(1).startswith("CALL"):
            block.calls.append(int(m.group(2), 16))
        if (stop_at_ret and op.startswith("RET")) or (not stop_at_ret and op == "JMP"):
            break
        if not stop_at_ret and op == "EXIT" and not text.startswith("@"):
            break
    return block


def disassemble(nvdisasm: str, arch: str, data: bytes, base: int) -> str:
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(data)
        f.flush()
        return subprocess.run([nvdisasm, "-b", arch, "-base", hex(base), f.name], capture_output=True, text=True).stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dump", type=Path)
    p.add_argument("--arch", default="SM90")
    args = p.parse_args()
    nvdisasm = shutil.which("nvdisasm")
    if nvdisasm is None:
        sys.exit("nvdisasm not found: put the CUDA toolkit's bin on PATH, or pip install nvidia-cuda-nvdisasm")

    def regions_of(key: str) -> dict:
        """The pages a function jumps into, read when it was first launched (DEV-SLOT.region-ADDRESS.bin)."""
        return {
            int(r.name.split(".region-")[1][:-4], 16): r.read_bytes() for r in args.dump.glob(f"{key}.region-*.bin")
        }

    regions: dict = {}

    def at(address: int) -> str:
        """The code at an address; nvdisasm refuses a slice that runs into data, so shorter ones are tried."""
        for base, data in regions.items():
            if base <= address < base + len(data):
                for length in (0x800, 0x600, 0x400, 0x200, 0x100):
                    text = disassemble(nvdisasm, args.arch, data[address - base : address - base + length], address)
                    if instructions(text):
                        return text
        return ""

    for entry in (args.dump / "functions.txt").read_text().splitlines():
        key, name = entry.split(" ", 1)
        regions = regions_of(key)
        sass = disassemble(nvdisasm, args.arch, (args.dump / f"{key}.bin").read_bytes(), 0)
        targets = jumps_out(sass)
        print(f"{key} {name[:100]}: {len(instructions(sass))} instructions, {len(targets)} jumps to trampolines")
        for target in targets:
            text = at(target)
            if not text:
                print(f"  {target:#x}: not in the dumped regions")
                continue
            t = walk(text, stop_at_ret=False)
            print(f"  trampoline {target:#x}: {t.line()}")
            for call in t.calls:
                helper = at(call)
                if helper:
                    print(f"    calls {call:#x}: {walk(helper, stop_at_ret=True).line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
