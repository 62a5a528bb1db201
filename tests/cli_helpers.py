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
    env.update(extra)
    return env


def gpuobs_cmd(*args) -> list:
    return [sys.executable, "-m", "gpuobs", *args]


def gpuobs(*args, cwd=None, env=None, timeout=120, **extra_env) -> subprocess.CompletedProcess:
    """`gpuobs ARGS...`; stdout and stderr as text."""
    return subprocess.run(gpuobs_cmd(*map(str, args)), cwd=cwd, env=env or repo_env(**extra_env),
                          capture_output=True, text=True, timeout=timeout)
