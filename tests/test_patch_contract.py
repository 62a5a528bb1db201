"""What each device patch may do, read from its PTX (needs nvcc, no GPU): the
hot paths keep the promises the overhead ladder depends on (no load before a
memory patch's sampling test but the record gate's cached one, one slot read per
block exit, fire-and-forget counters), no patch calls itself, and every patch the tool plans exists."""

import re
import subprocess

import pytest

from gpuobs.native_sources import native_root
from gpuobs.record.native_build import NativeUnavailable, find_toolchain, patch_ptx_command


def ptx_functions(text: str) -> dict:
    """PTX function name -> body (between its braces)."""
    bodies = {}
    for m in re.finditer(r"\.func\s+(?:\([^)]*\)\s*)?(\w+)\(", text):
        start = text.index("{", m.end())
        depth, i = 0, start
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        bodies[m.group(1)] = text[start : i + 1]
    return bodies


def compile_ptx(tmp_path, source=None) -> dict:
    try:
        tc = find_toolchain()
    except NativeUnavailable as exc:
        pytest.skip(str(exc))
    out = tmp_path / "patches.ptx"
    proc = subprocess.run(patch_ptx_command(tc, out, source=source), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return ptx_functions(out.read_text())


def count(body: str, op: str) -> int:
    return len(re.findall(rf"^\s*(?:@%p\d+\s+)?{re.escape(op)}\b", body, re.M))


def global_loads(body: str) -> int:
    return len(re.findall(r"^\s*(?:@%p\d+\s+)?ld(?:\.\w+)*\.global\b", body, re.M))


def gate_loads(body: str) -> int:
    """Reads through the read-only cache: in the hot paths, the record gate's only."""
    return len(re.findall(r"^\s*(?:@%p\d+\s+)?ld\.global\.nc\b", body, re.M))


def undefined_addresses(body: str) -> set:
    """Registers used as memory addresses but never written: what undefined
    behaviour (e.g. a helper that calls itself) compiles to."""
    used = set(re.findall(r"\[(%rd\d+)", body))
    outside = re.sub(r"\[[^\]]*\]", "", body)
    return {r for r in used if not re.search(rf"{re.escape(r)}\b", outside)}


def check_contract(funcs: dict) -> None:
    for name, body in funcs.items():
        assert not undefined_addresses(body), f"{name} addresses memory through undefined registers"
    exit_ = funcs["gpuobs_block_trace_exit"]
    assert gate_loads(exit_) == 1, "a block exit reads the record gate once"
    assert global_loads(exit_) - gate_loads(exit_) == 1, "a block exit reads its slot once"
    assert count(exit_, "red.relaxed.gpu.global.max.u64") == 1, "the end is stamped by a fire-and-forget max"
    assert count(exit_, "red.relaxed.gpu.global.add.u32") == 1, "the exit count by a fire-and-forget add"
    counter = funcs["gpuobs_block_counter"]
    assert global_loads(counter) == gate_loads(counter) == 1 and "atom." not in counter, "the gate, no other load"
    assert count(counter, "red.relaxed.gpu.global.add.u64") == 1
    mem = funcs["gpuobs_mem_access"]
    # No load before the sampling test but the record gate's, cached, in the counting lane
    # (the shift rides in the pointer).
    assert global_loads(mem) == gate_loads(mem) == 1, "the record gate is a memory patch's one hot-path load"
    assert "atom." not in mem, "the claim is on the capture path, out of line"
    for noop in ("gpuobs_block_noop", "gpuobs_block_exit_noop", "gpuobs_mem_noop"):
        assert global_loads(funcs[noop]) == 0 and "red." not in funcs[noop] and "call" not in funcs[noop]
    for name, body in funcs.items():
        assert not re.search(rf"\bcall(?:\.uni)?\b[^;]*\b{name}\b", body), f"{name} calls itself"


def test_patches_keep_their_contract(tmp_path):
    check_contract(compile_ptx(tmp_path))


def test_every_planned_patch_exists(tmp_path):
    funcs = compile_ptx(tmp_path)
    schema = (native_root() / "schemas" / "gpuobs_schema.h").read_text()
    start = schema.index("#define GPUOBS_MODE_PATCHES")  # the patch plan: each mode's row
    plan = schema[start : schema.index("\n\n", start)]
    planned = set(re.findall(r'"(gpuobs_\w+)"', plan))
    assert len(planned) >= 7 and planned <= set(funcs)


def test_the_contract_catches_a_patch_that_calls_itself(tmp_path):
    """The review slip of 2026-11-29: a helper that called itself compiled, and the
    exit lost its stamps (block_trace faulted on the GPU)."""
    source = (native_root() / "device_patches" / "gpuobs_patches.cu").read_text()
    good = "    return reinterpret_cast<gpuobs_event*>(arena(ud) + GPUOBS_ARENA_EVENTS) + index;\n}"
    assert good in source
    bad = tmp_path / "gpuobs_patches.cu"
    bad.write_text(source.replace(good, "    return event_at(ud, index);\n}", 1))
    with pytest.raises(AssertionError):
        check_contract(compile_ptx(tmp_path, source=bad))
