"""A recording cut short by another process while gpuobs reads it is one `gpuobs:`
line (exit 2) naming the file, with no output and no temp file left. Before, the
memory map's SIGBUS ended the process (exit 135, no message, the temp file left).

The cut is made at a fixed point of the read (`truncate(1)`, another process,
run from a hook in the reader), so the test is deterministic: mid-load, where
the parser then reads past the new end, and after load, where `export` and
`info` then read the recording's events from pages that are gone."""

import shutil
import signal
import subprocess
import sys

import pytest

from .cli_helpers import DATA, repo_env

SAMPLE = DATA / "decode_block_trace.gpuobs"

# Runs the CLI with a hook that has `truncate` cut the recording at a fixed point.
DRIVER = r"""
import subprocess, sys
from gpuobs import cli
from gpuobs.recording_file import reader

path, when, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
size = __import__("os").path.getsize(path)

def cut():
    subprocess.run(["truncate", "-s", str(size // 3), path], check=True)

if when == "after-load":  # both openers: load() and export's window-by-window open_windows()
    from gpuobs.recording_file import windows

    def after(real):
        def opened(*args, **kwargs):
            rec = real(*args, **kwargs)
            cut()
            return rec
        return opened
    reader.load = after(reader.load)
    windows.open_windows = after(windows.open_windows)
else:  # mid-load: at the first chunk past half the file, or (C walk) as the walk begins
    real_chunk = reader._Parser._chunk
    def chunk(self, rec, offset):
        if offset > size // 2 and not getattr(self, "cut", False):
            self.cut = True
            cut()
        return real_chunk(self, rec, offset)
    reader._Parser._chunk = chunk
    from gpuobs.recording_file import chunk_walk
    real_walk = chunk_walk.Walk.walk
    def walk(self, offset, end):
        if not getattr(self, "cut", False):  # the mapped file then ends under the walk
            self.cut = True
            cut()
        return real_walk(self, offset, end)
    chunk_walk.Walk.walk = walk
sys.argv = ["gpuobs"] + argv
cli.main()
"""


def _run(tmp_path, when, *args):
    rec = tmp_path / "r.gpuobs"
    shutil.copy(SAMPLE, rec)
    cmd = [sys.executable, "-c", DRIVER, str(rec), when, *[a.format(rec=rec, tmp=tmp_path) for a in args]]
    return subprocess.run(cmd, env=repo_env(), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "when,args",
    [
        ("after-load", ["export", "{rec}", "-o", "{tmp}/t.pftrace"]),
        ("after-load", ["info", "{rec}"]),
        ("mid-load", ["export", "{rec}", "-o", "{tmp}/t.pftrace"]),
        ("mid-load", ["info", "{rec}"]),
        ("mid-load", ["info", "{rec}", "--salvage"]),
    ],
    ids=["export-after-load", "info-after-load", "export-mid-load", "info-mid-load", "salvage-mid-load"],
)
def test_a_recording_cut_short_while_read_is_one_clear_error(tmp_path, when, args):
    r = _run(tmp_path, when, *args)
    assert r.returncode != -signal.SIGBUS and r.returncode != 128 + signal.SIGBUS, "died of SIGBUS"
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    size = SAMPLE.stat().st_size
    assert lines[0].startswith(f"gpuobs: {tmp_path / 'r.gpuobs'}: at byte "), lines[0]
    # the map's guard, or the windowed reader's pread of events (export), says it
    said = f"was truncated from {size:,} to {size // 3:,} bytes while gpuobs read it"
    assert said in lines[0] or "the file shrank while it was read" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.gpuobs"]  # no trace, no temp file
    assert r.stdout == ""  # info printed nothing read from the zeros


def test_an_intact_recording_reads_as_before_and_releases_its_descriptor(tmp_path):
    """The guard keeps a descriptor per live map: it goes with the map."""
    import gc
    import os

    from gpuobs.recording_file import mapping_guard
    from gpuobs.recording_file.reader import load

    gc.collect()  # an earlier test's maps closed now, not in the middle of the count
    before = len(os.listdir("/proc/self/fd"))
    rec = load(SAMPLE)
    assert len(rec.events) == 28_662 and len(mapping_guard._live) >= 1
    mapping_guard.check()
    del rec
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("command", ["info", "info --salvage", "export"])
def test_without_the_handler_the_recording_is_read_into_memory(tmp_path, command):
    """GPUOBS_PURE_PYTHON=1 (or no C compiler): the chunks are read into memory, not
    mapped, so a cut after load changes nothing `info --salvage` reads (it loads the
    whole recording); `info` and export read their events from the file window by
    window, and say the file shrank."""
    rec = tmp_path / "r.gpuobs"
    shutil.copy(SAMPLE, rec)
    args = command.split() + [str(rec)]
    if command == "export":
        args += ["-o", str(tmp_path / "t.pftrace")]
    cmd = [sys.executable, "-c", DRIVER, str(rec), "after-load", *args]
    r = subprocess.run(cmd, env=repo_env(GPUOBS_PURE_PYTHON="1"), capture_output=True, text=True, timeout=120)
    if command == "info --salvage":
        assert r.returncode == 0 and "28,662" in r.stdout, r.stderr
    else:
        assert r.returncode == 2 and "the file shrank while it was read" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and r.stdout == ""
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r.gpuobs"]
