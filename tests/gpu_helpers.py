"""What the GPU tests share: running a program under `gpuobs record`."""

import os
import signal
import subprocess
import sys

import gpuobs


def record(tmp_path, mode, cmd, *extra, name=None, check=True, env=None, timeout=900):
    """Runs cmd under `gpuobs record --mode MODE [extra]`; returns the process and the
    recording (None when none was written). check: the run must exit 0. A run past
    timeout fails the test, and its whole process group is killed: a program left
    running (a kernel spinning on the GPU) would slow every later test and benchmark."""
    out = tmp_path / f"{name or mode}.gpuobs"
    args = [sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(out), *extra, "--", *cmd]
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    ) as p:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as late:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
            raise AssertionError(
                f"`gpuobs record` ran past {timeout} s and was killed; stderr:\n{stderr[-4000:]}"
            ) from late
    proc = subprocess.CompletedProcess(args, p.returncode, stdout, stderr)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, (gpuobs.load(out) if out.exists() else None)


def launches_named(rec, pattern):
    """Rows of rec.launches whose function name contains pattern."""
    return [i for i, launch in enumerate(rec.launches) if pattern in rec.launch_function(launch).name]


def assert_windows_add_up(rec):
    """Every flush window: what was recorded and what was dropped make what was attempted."""
    f = rec.flushes
    assert (f["recorded"] + f["dropped"] == f["attempted"]).all()
