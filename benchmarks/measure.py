"""Runs a command as a child process and measures what it took: wall seconds and
the child's own peak resident memory (from wait4, so nothing of the caller's
counts), for the scale benchmarks."""

import os
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Run:
    seconds: float
    peak_mb: float
    returncode: int
    output: str
    cpu_seconds: float = 0.0  # the child's user + system time: steadier than wall time on a shared machine


def measure(cmd: list, env: dict | None = None, cwd=None) -> Run:
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    output = proc.stdout.read().decode(errors="replace")
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return Run(time.perf_counter() - began, usage.ru_maxrss / 1024, proc.returncode, output, cpu)
