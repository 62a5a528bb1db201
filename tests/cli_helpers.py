"""Run the `gpuobs` command as a user does: a subprocess, from this checkout."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data"
SAMPLES = sorted(DATA.glob("*.gpuobs"))


def repo_env(**extra) -> dict:
    """The environment in which `python -m gpuobs` is the package these tests import
    (the worktree's with PYTHONPATH, the installed one under tests/run.sh)."""
    import gpuobs

    env = dict(os.environ)
    package_parent = str(Path(gpuobs.__file__).resolve().parents[1])
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("GPUOBS_DEBUG", None)
    env.pop("COLUMNS", None)  # text is laid out to COLUMNS: the caller's terminal must not change what tests see
    env.update(extra)
    return env


def gpuobs_cmd(*args) -> list:
    return [sys.executable, "-m", "gpuobs", *args]


def gpuobs(*args, cwd=None, env=None, timeout=120, **extra_env) -> subprocess.CompletedProcess:
    """`gpuobs ARGS...`; stdout and stderr as text."""
    return subprocess.run(
        gpuobs_cmd(*map(str, args)),
        cwd=cwd,
        env=env or repo_env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rest_of_output(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Waits for a Popen whose stdout was read with readline(), then returns the rest
    of its stdout and stderr. Not communicate(): it reads the raw pipes and would
    miss lines readline() had already buffered."""
    proc.wait(timeout=timeout)
    return proc.stdout.read(), proc.stderr.read()


def write_recording(
    path, names=None, mode=None, events=True, n_launches=6, blocks_per_launch=256, dropped=0, notices=()
):
    """A small recording of `n_launches` launches of 3 kernels named `names` (demangled),
    in `mode` (block_trace by default; without `events` a counting mode keeps none),
    with `notices` ((code, text) pairs) from the tool."""
    import numpy as np

    from gpuobs.recording_file import schema, synthetic
    from gpuobs.recording_file.recording_writer import RecordingWriter

    ev, launches = synthetic.block_trace_events(n_launches, blocks_per_launch, sm_count=132)
    names = names or [d or m for m, d in synthetic.FUNCTION_NAMES]
    with RecordingWriter(path) as w:
        w.run(pid=4242, mode=mode if mode is not None else schema.Mode.BLOCK_TRACE, argv=["python3", "app.py"])
        w.device(name="NVIDIA H200", sm_count=132)
        w.module(module_id=1)
        for slot, name in enumerate(names):
            w.function(function_slot=slot, mangled=f"_Z{slot}k", demangled=name)
        w.launches(launches)
        counts = np.zeros(n_launches, schema.dtype("gpuobs_launch_count"))
        counts["grid_id"] = launches["grid_id"]
        counts["count"] = blocks_per_launch
        counts["launches_sharing"] = 1
        kept = ev[: len(ev) - dropped] if events else ev[:0]
        w.flush(attempted=len(kept) + dropped, recorded=len(kept), dropped=dropped, launch_counts=counts)
        if len(kept):
            w.events(kept)
        for code, text in notices:
            w.notice(code=code, text=text)
        w.end(flushes=1, launches=n_launches, events=len(kept))
    return path


def fake_toolchain(folder: Path) -> dict:
    """Stand-ins for nvcc and the C++ compiler that write their -o file, and the
    environment that makes `gpuobs build` use them (a build in no time, no GPU)."""
    bin_dir = Path(folder) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    fake = '#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ "$1" = -o ]; then shift; echo built > "$1"; fi; shift; done\n'
    for name in ("nvcc", "fakecxx"):
        (bin_dir / name).write_text(fake)
        (bin_dir / name).chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CXX": str(bin_dir / "fakecxx"),
        "GPUOBS_CACHE": str(Path(folder) / "cache"),
    }


def copy_as_process(source, path, pid: int):
    """`source` written again as the recording of process `pid` (its RUN chunk's pid):
    a child's `<stem>.<pid>.gpuobs` holds its own pid."""
    import dataclasses

    from gpuobs.recording_file.reader import load
    from gpuobs.recording_file.recording_writer import copy_recording

    rec = load(source)
    rec.run = dataclasses.replace(rec.run, pid=pid)
    copy_recording(rec, path)
    return path
