"""malloc_policy.keep_freed_blocks: glibc's mallopt asked for both thresholds where it is
there, nothing asked where it is not; the export asks only for host traces."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpuobs import malloc_policy

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"


def test_both_thresholds_are_asked(monkeypatch):
    asked = []

    def mallopt(param, value):
        asked.append((param, value))
        return 1

    monkeypatch.setattr(malloc_policy, "_mallopt", lambda: mallopt)
    assert malloc_policy.keep_freed_blocks()
    assert asked == [(malloc_policy.M_MMAP_THRESHOLD, 32 << 20), (malloc_policy.M_TRIM_THRESHOLD, 128 << 20)]


def test_a_refused_setting_says_so(monkeypatch):
    monkeypatch.setattr(malloc_policy, "_mallopt", lambda: lambda param, value: 0)
    assert not malloc_policy.keep_freed_blocks()


@pytest.mark.parametrize("error", [OSError, AttributeError, TypeError])  # no libc, musl/macOS, Windows
def test_nothing_is_asked_without_glibc_s_mallopt(monkeypatch, error):
    def missing(*args, **kwargs):
        raise error("none here")

    monkeypatch.setattr(malloc_policy.ctypes, "CDLL", missing)
    assert malloc_policy._mallopt() is None and not malloc_policy.keep_freed_blocks()


def test_glibc_takes_them_here():
    if malloc_policy._mallopt() is None:
        pytest.skip("no mallopt here")
    # in a process of its own: the suite's malloc left as it is
    code = "from gpuobs.malloc_policy import keep_freed_blocks; print(keep_freed_blocks())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("host", [False, True])
def test_the_export_asks_only_for_host_traces(tmp_path, monkeypatch, host):
    from gpuobs import cli

    asked = []
    monkeypatch.setattr(malloc_policy, "keep_freed_blocks", lambda: asked.append(1) or True)
    args = ["gpuobs", "export", str(DATA / "side_by_side_api_trace.gpuobs"), "-o", str(tmp_path / "t.pftrace")]
    if host:
        args += ["--host", str(DATA / "side_by_side_profiler.json")]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code in (0, None) and asked == ([1] if host else [])
