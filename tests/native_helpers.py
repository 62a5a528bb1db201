"""Compiling a host-side check program against the tool's sources, for the tests
that drive tool/*.cpp directly (no GPU needed)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuobs.native_sources import native_root

HERE = Path(__file__).resolve().parent


def compile_check(out: Path, check: str, *tool_sources: str) -> Path:
    """tests/native/CHECK built with tool/SOURCES into OUT (skips without a host C++ compiler)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    root = native_root()
    flags = ["-std=c++17", "-O2", "-pthread", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]
    includes = [f"-I{root / 'tool'}", f"-I{root / 'schemas'}"]
    sources = [str(HERE / "native" / check), *(str(root / "tool" / s) for s in tool_sources)]
    subprocess.run([cxx, *flags, *includes, *sources, "-o", str(out)], check=True)
    return out
