"""The in-process half of gpuobs: load the tool into a running Python process
through cffi before CUDA starts, flush on demand, read counters.

    import gpuobs
    gpuobs.attach(mode="block_trace", output="run.gpuobs")   # before torch.cuda is used
    ...
    gpuobs.flush()
"""
from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

from .native_build import build
from .record import RecordOptions, tool_environment

_FFI = FFI()
_FFI.cdef("""
int gpuobs_tool_active(void);
int gpuobs_tool_flush(void);
const char* gpuobs_tool_output(void);
unsigned long long gpuobs_tool_launches(void);
""")
_lib = None


class AttachError(RuntimeError):
    pass


def attach(mode: str = "block_trace", output: str = "gpuobs.gpuobs", sample_shift: int = 10,
           capacity: int = 1 << 20, kernels: str = "", scope: str = "function"):
    """Loads the tool into this process. Must run before the process's first CUDA call."""
    global _lib
    if _lib is not None:
        return _lib
    if _cuda_already_initialised():
        raise AttachError("CUDA is already initialised in this process: call gpuobs.attach() before "
                          "the first CUDA call (before torch.cuda is used), or use `gpuobs record`")
    native = build()
    opts = RecordOptions(mode=mode, sample_shift=sample_shift, capacity=capacity, kernels=kernels,
                         output=Path(output), scope=scope)
    env = tool_environment(native, opts, base={})
    env.pop("LD_PRELOAD")
    os.environ.update(env)
    # RTLD_LOCAL: made global, the tool's C++ template symbols would interpose on
    # those of libraries loaded later (importing torch then crashed, seen on the H200).
    _lib = _FFI.dlopen(str(native.tool), _FFI.RTLD_NOW | _FFI.RTLD_LOCAL)
    if not _lib.gpuobs_tool_active():
        raise AttachError("the gpuobs tool loaded but did not start: see the 'gpuobs:' line on stderr")
    return _lib


def _cuda_already_initialised() -> bool:
    import sys
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


def flush() -> int:
    """Synchronises every instrumented context and writes its events now."""
    if _lib is None:
        raise AttachError("gpuobs is not attached: call gpuobs.attach() first")
    return int(_lib.gpuobs_tool_flush())


def output_path() -> str:
    if _lib is None:
        return ""
    return _FFI.string(_lib.gpuobs_tool_output()).decode()


def launches() -> int:
    return int(_lib.gpuobs_tool_launches()) if _lib is not None else 0
