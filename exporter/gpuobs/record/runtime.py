"""The in-process half of gpuobs: load the tool into a running Python process
through cffi before CUDA starts, flush on demand, read counters.

    import gpuobs
    gpuobs.attach(mode="block_trace", output="run.gpuobs")   # before torch.cuda is used
    ...
    gpuobs.flush()

Recording windows: gpuobs.pause() closes every context's record gate on the
device, so kernels (CUDA graph replays included, whenever the graph was
captured) run the patches' early return and their launches are only counted;
gpuobs.resume() opens it again; `with gpuobs.window(): ...` records just that
region. They work in a process started by `gpuobs record` as well.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re

from cffi import FFI

from ..errors import GpuobsError
from ..native_sources import native_root
from ..recording_file import schema
from .native_build import build
from .options import OPTIONS
from .run import RecordOptions, tool_environment

CONTROL_HEADER = "control_api.h"  # in tool/: the tool's exported calls, declared once
_CDEF = schema.cdef_text((native_root() / "tool" / CONTROL_HEADER).read_text())
CONTROL_CALLS = tuple(re.findall(r"\b(gpuobs_tool_\w+)\s*\(", _CDEF))  # what the tool must export
_FFI = FFI()
_FFI.cdef(_CDEF)
NOT_RECORDING = _FFI.typeof("enum gpuobs_control_status").relements["GPUOBS_CONTROL_NOT_RECORDING"]
_lib = None


class AttachError(GpuobsError, RuntimeError):
    pass


def attach(**options):
    """Loads the tool into this process. Must run before the process's first CUDA call.
    Takes every record option by its name (see the signature; the same options as
    `gpuobs record`, each with its default)."""
    global _lib
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"attach() got an unexpected keyword argument {unknown[0]!r}")
    if _lib is not None:
        return _lib
    for name, value in options.items():
        problem = OPTIONS[name].problem(value, f"gpuobs.attach({name}={value!r})")
        if problem:
            raise AttachError(problem)
    if _cuda_already_initialised():
        raise AttachError(
            "CUDA is already initialised in this process: call gpuobs.attach() before "
            "the first CUDA call (before torch.cuda is used), or use `gpuobs record`"
        )
    native = build()
    opts = RecordOptions(**options)
    env = tool_environment(native, opts, base={})
    env.pop("LD_PRELOAD")
    env.pop("CUDA_INJECTION64_PATH")  # attach() records this process, not its children
    os.environ.update(env)
    # RTLD_LOCAL: made global, the tool's C++ template symbols would interpose on
    # those of libraries loaded later (importing torch then crashed, seen on the H200).
    _lib = _FFI.dlopen(str(native.tool), _FFI.RTLD_NOW | _FFI.RTLD_LOCAL)
    if not _lib.gpuobs_tool_active():
        raise AttachError("the gpuobs tool loaded but did not start: see the 'gpuobs:' line on stderr")
    return _lib


# What help(gpuobs.attach) shows: a keyword per record option, with its default.
attach.__signature__ = inspect.Signature(
    [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default) for o in OPTIONS.values()]
)


def _cuda_already_initialised() -> bool:
    import sys

    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


def _tool():
    """The tool's control surface: the attached library, or the one `gpuobs
    record` preloaded into this process."""
    global _lib
    if _lib is None:
        process = _FFI.dlopen(None)
        try:
            if process.gpuobs_tool_active():
                _lib = process
        except AttributeError:
            pass
    if _lib is None:
        raise AttachError("gpuobs is not attached: call gpuobs.attach() first, or run under `gpuobs record`")
    return _lib


def flush() -> int:
    """Synchronises every instrumented context and writes its events now."""
    return int(_tool().gpuobs_tool_flush())


def _turn(fn) -> int:
    lib = _tool()
    changed = int(fn(lib))
    if changed == NOT_RECORDING:
        raise AttachError("the gpuobs tool is not recording (see the 'gpuobs:' line on stderr)")
    return changed


def pause() -> int:
    """Ends a recording window: synchronises, flushes, and closes every context's
    record gate. Launches until resume() run the patches' early return and are only
    counted. Returns the contexts turned."""
    return _turn(lambda lib: lib.gpuobs_tool_pause())


def resume() -> int:
    """Starts a recording window: synchronises, then opens every context's record
    gate. Returns the contexts turned."""
    return _turn(lambda lib: lib.gpuobs_tool_resume())


def paused() -> bool:
    return bool(_tool().gpuobs_tool_paused())


@contextlib.contextmanager
def window():
    """Records only the code inside the block (start the run paused: `gpuobs
    record --paused`, or call pause() first)."""
    resume()
    try:
        yield
    finally:
        pause()


def output_path() -> str:
    if _lib is None:
        return ""
    return _FFI.string(_lib.gpuobs_tool_output()).decode()


def launches() -> int:
    return int(_lib.gpuobs_tool_launches()) if _lib is not None else 0
