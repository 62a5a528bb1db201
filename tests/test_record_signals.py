"""`gpuobs record` hands each signal to the program exactly once, whoever sends it:
the terminal (a real pseudo-terminal's Ctrl-C), `kill` to gpuobs's process group,
or `kill` to gpuobs alone; and it still settles the recording afterwards. gpuobs
runs as the leader of a real process group of its own here, as under a shell."""

import json
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest

from .cli_helpers import DATA, fake_toolchain, gpuobs_cmd, repo_env

BLOCK_SAMPLE = str(DATA / "decode_block_trace.gpuobs")

# Counts its handler calls; a second delivery has half a second to land after the first.
COUNTER = r"""
import json, os, shutil, signal, sys, time
out, sample = sys.argv[1], sys.argv[2]
calls = []
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, lambda signum, frame: calls.append(signum))
open(out + ".ready", "w").close()
deadline = time.monotonic() + 30
while not calls and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.5)
shutil.copy(sample, os.environ["GPUOBS_OUTPUT"])  # the tool's recording, as a real run leaves one
with open(out + ".part", "w") as f:  # renamed whole: the test polls for `out` and reads it at once
    json.dump(calls, f)
os.replace(out + ".part", out)
sys.exit(3)
"""

SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.fixture(scope="module")
def toolchain(tmp_path_factory):
    from gpuobs.record.native_build import sanitizer_dirs

    if not sanitizer_dirs():
        pytest.skip("no sanitizer headers (the test extra installs them)")
    return fake_toolchain(tmp_path_factory.mktemp("signals"))


def _record_args(tmp_path):
    counter = tmp_path / "counter.py"
    counter.write_text(COUNTER)
    out = tmp_path / "calls.json"
    args = ["record", "-o", str(tmp_path / "r.gpuobs"), "--", sys.executable, str(counter), str(out), BLOCK_SAMPLE]
    return args, out


def _wait_ready(out, proc):
    deadline = time.monotonic() + 120  # the stand-in build runs first
    while not os.path.exists(str(out) + ".ready"):
        assert proc.poll() is None, "gpuobs exited before the program started"
        assert time.monotonic() < deadline, "the program never started"
        time.sleep(0.02)


def _settled(out, stderr: str, rc: int):
    assert rc == 3, stderr  # the program's own exit status, though it was signalled
    assert "r.gpuobs: block_trace" in stderr, stderr  # the recording was still summed up
    return json.loads(out.read_text())


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("sender", ["group", "gpuobs"])
def test_a_kill_reaches_the_program_once(toolchain, tmp_path, sig, sender):
    args, out = _record_args(tmp_path)
    proc = subprocess.Popen(
        gpuobs_cmd(*args),
        cwd=tmp_path,
        env={**repo_env(), **toolchain},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # gpuobs leads its own process group, as a shell's job does
    )
    try:
        _wait_ready(out, proc)
        if sender == "group":
            os.killpg(proc.pid, sig)  # kill -SIG -- -PGID
        else:
            os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert _settled(out, stderr, proc.returncode) == [sig]


def test_ctrl_c_at_a_terminal_reaches_the_program_once(toolchain, tmp_path):
    """gpuobs in the foreground of a real pseudo-terminal; ^C typed into it."""
    args, out = _record_args(tmp_path)
    master, slave = os.openpty()
    takes_terminal = "import fcntl, runpy, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    run_cli = f"sys.argv = ['gpuobs'] + {args!r}; runpy.run_module('gpuobs', run_name='__main__')"
    proc = subprocess.Popen(
        [sys.executable, "-c", takes_terminal + run_cli],
        cwd=tmp_path,
        env={**repo_env(), **toolchain, "COLUMNS": "1000"},  # one summary line, unwrapped
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    said = []

    def read_terminal():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal closed with the last process on it
                return
            if not chunk:
                return
            said.append(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        _wait_ready(out, proc)
        os.write(master, b"\x03")
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(timeout=10)
        os.close(master)
    text = b"".join(said).decode(errors="replace").replace("\r\n", "\n")
    assert _settled(out, text, proc.returncode) == [signal.SIGINT]


def _on_terminal(cmd, tmp_path, env):
    """cmd as the session leader of a new real pseudo-terminal (its controlling
    terminal); returns the process, a function that types into the terminal and one
    that hangs it up (closes its master side)."""
    master, slave = os.openpty()
    takes_terminal = "import fcntl, os, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    proc = subprocess.Popen(
        [sys.executable, "-c", takes_terminal + f"os.execvp({cmd[0]!r}, {cmd!r})"],
        cwd=tmp_path,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    stop = threading.Event()

    def read_terminal():  # drained, so that nothing blocks writing to it
        while not stop.is_set():
            if select.select([master], [], [], 0.05)[0]:
                try:
                    if not os.read(master, 4096):
                        return
                except OSError:
                    return

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()

    def hang_up():
        stop.set()
        reader.join(timeout=10)
        os.close(master)  # as when the terminal's window closes or ssh drops

    return proc, (lambda text: os.write(master, text.encode())), hang_up


@pytest.mark.parametrize("leader", ["gpuobs", "shell"])
def test_a_terminal_hang_up_reaches_the_program_once(toolchain, tmp_path, leader):
    """The terminal hangs up while `record` runs in its foreground: the kernel sends
    SIGHUP to the session's leader (gpuobs itself, or an interactive shell, which
    passes it to its jobs: gpuobs's group), gpuobs passes it on, and the program, in
    its own group and the terminal's foreground, must not get a second one."""
    args, out = _record_args(tmp_path)
    env = {**repo_env(), **toolchain, "COLUMNS": "1000"}
    if leader == "gpuobs":
        proc, _type, hang_up = _on_terminal(gpuobs_cmd(*args), tmp_path, env)
    else:
        proc, type_in, hang_up = _on_terminal(["bash", "--norc", "--noprofile", "-i"], tmp_path, env)
        type_in(" ".join(map(shlex.quote, gpuobs_cmd(*args))) + "\n")
    try:
        _wait_ready(out, proc)
        hang_up()
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30  # under the shell, gpuobs may outlive its leader
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert json.loads(out.read_text()) == [signal.SIGHUP]
