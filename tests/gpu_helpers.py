"""What the GPU tests share: running a program under `gpuobs record`."""

import subprocess
import sys

import gpuobs


def record(tmp_path, mode, cmd, *extra, name=None, check=True, env=None, timeout=900):
    """Runs cmd under `gpuobs record --mode MODE [extra]`; returns the process and the
    recording (None when none was written). check: the run must exit 0."""
    out = tmp_path / f"{name or mode}.gpuobs"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(out), *extra, "--", *cmd],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,  # a hang fails the test instead of the run
    )
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, (gpuobs.load(out) if out.exists() else None)
