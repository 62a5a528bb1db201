import os
import shutil

import pytest

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


def have_compiler(name: str) -> bool:
    return shutil.which(name) is not None
