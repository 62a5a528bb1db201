import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuobs.native_sources import native_root
from gpuobs.recording_file import synthetic


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where a GPU and the sanitizer are present (the lent H200), never in CI."""
    if os.environ.get("GPUOBS_GPU_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU: set GPUOBS_GPU_TESTS=1 on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def block_recording(tmp_path):
    return synthetic.write_block_trace_recording(tmp_path / "run.gpuobs")


@pytest.fixture(scope="session")
def writer(tmp_path_factory):
    """tests/native/write_recording.cpp built with the tool's recording_file.cpp: it writes
    a recording as the host tool does (skips without a host C++ compiler)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    root = native_root()
    exe = tmp_path_factory.mktemp("bin") / "write_recording"
    subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O1",
            "-Wall",
            "-Wextra",
            f"-I{root / 'schemas'}",
            f"-I{root / 'tool'}",
            str(Path(__file__).resolve().parent / "native" / "write_recording.cpp"),
            str(root / "tool" / "recording_file.cpp"),
            str(root / "tool" / "chunk_compress.cpp"),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return exe


def have_compiler(name: str) -> bool:
    return shutil.which(name) is not None
