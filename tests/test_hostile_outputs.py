"""An export stopped by SIGTERM or SIGHUP while it writes leaves no hidden temp file,
and one killed outright (SIGKILL) has its temp file swept by the next write to
the same output; a live writer's temp file is left alone."""

import signal
import subprocess
import sys
import time

import pytest

from gpuobs.recording_file import synthetic

from .cli_helpers import gpuobs, gpuobs_cmd, repo_env


@pytest.fixture(scope="module")
def slow_recording(tmp_path_factory):
    """A recording whose export takes a while (many flush windows)."""
    return synthetic.write_many_flush_recording(tmp_path_factory.mktemp("slow") / "r.gpuobs", 4000, 2, 40)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_a_stopped_export_leaves_no_temp_file(tmp_path, slow_recording, sig):
    out = tmp_path / "t.pftrace"
    proc = subprocess.Popen(
        gpuobs_cmd("export", str(slow_recording), "-o", str(out)),
        env=repo_env(),
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),  # under nohup SIGHUP's SIG_IGN is inherited
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".t.pftrace.*.tmp")):
        assert proc.poll() is None, "the export ended before it was stopped: make the recording larger"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == -sig  # ends as the signal ends it
    assert list(tmp_path.iterdir()) == []


def test_a_killed_writers_temp_file_is_swept_by_the_next_write(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".t.pftrace.{dead.pid}.0123456789ab.tmp"
    live = tmp_path / f".t.pftrace.{subprocess.os.getpid()}.0123456789ab.tmp"
    other = tmp_path / f".other.pftrace.{dead.pid}.0123456789ab.tmp"
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    r = gpuobs("export", synthetic.write_block_trace_recording(tmp_path / "r.gpuobs"), "-o", tmp_path / "t.pftrace")
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and live.exists() and other.exists()


def test_dash_is_not_taken_for_a_file_named_dash(tmp_path):
    rec = synthetic.write_block_trace_recording(tmp_path / "r.gpuobs")
    for args in (["export", rec, "-o", "-"], ["trim", rec, "--flushes", "0:", "-o", "-"]):
        r = gpuobs(*args, cwd=tmp_path)
        assert r.returncode == 2 and "-o - (standard output) is not supported" in r.stderr, r.stderr
        assert not (tmp_path / "-").exists()


def test_a_stop_whose_exception_was_lost_still_stops_the_write(tmp_path):
    """numpy clears an error raised while it probes an operand's attributes, so a
    signal landing there loses its exception (seen: a SIGTERM export that finished
    with exit 0); the write must still end by the signal and leave nothing."""
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from gpuobs.outputs import write_atomically\n"
        "with write_atomically(Path(sys.argv[1])) as fh:\n"
        "    fh.write(b'partial')\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        sum(range(1000))  # the handler runs here and its exception is swallowed\n"
        "    except BaseException:\n"
        "        pass\n"
        "    fh.write(b'rest')\n"
        "print('finished')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "t.pftrace")],
        env=repo_env(),
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stdout, r.stderr)
    assert "finished" not in r.stdout
    assert list(tmp_path.iterdir()) == []
