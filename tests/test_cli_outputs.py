"""Every writer (export, export --archive, trim, plot) against what can go wrong
with its output: an existing file, a symbolic link, a hard link of the input, the
input itself, a missing or read-only folder and a full disk. A full or read-only
folder is a tiny tmpfs mounted in a private mount namespace where that works
(root, or user namespaces), and a simulated one (tests/fault_injection) everywhere."""

import errno
import hashlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuobs import outputs

from .cli_helpers import DATA, gpuobs, gpuobs_cmd, repo_env

BLOCK = DATA / "decode_block_trace.gpuobs"
SIDE = DATA / "side_by_side_api_trace.gpuobs"
PROFILER = DATA / "side_by_side_profiler.json"
OLD = b"the previous output, which must survive" * 10
HERE = Path(__file__).resolve().parent

WRITERS = {  # the arguments that make each writer write OUT
    "export": lambda out: ["export", BLOCK, "-o", out],
    "archive": lambda out: ["export", SIDE, "--host", PROFILER, "--archive", "-o", out],
    "trim": lambda out: ["trim", BLOCK, "--flushes", "0:1", "-o", out],
    "plot": lambda out: ["plot", BLOCK, "-o", out],
}
SUFFIX = {"export": ".pftrace", "archive": ".zip", "trim": ".gpuobs", "plot": ".png"}


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def needs(writer):
    if writer == "plot":
        pytest.importorskip("matplotlib")


def clean(r):
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize("writer", WRITERS)
def test_a_symbolic_link_is_never_written_through(writer, tmp_path):
    needs(writer)
    victim = tmp_path / "victim"
    victim.write_bytes(OLD)
    out = tmp_path / f"out{SUFFIX[writer]}"
    out.symlink_to(victim)
    for force in ([], ["-f"]):
        r = clean(gpuobs(*WRITERS[writer](out), *force))
        assert r.returncode == 2 and "is a symbolic link" in r.stderr
        assert victim.read_bytes() == OLD and out.is_symlink()
    dangling = tmp_path / f"dangling{SUFFIX[writer]}"
    dangling.symlink_to(tmp_path / "nowhere")
    r = clean(gpuobs(*WRITERS[writer](dangling), "-f"))
    assert r.returncode == 2 and not (tmp_path / "nowhere").exists()


def test_an_output_that_is_an_input_is_refused_even_with_force(tmp_path):
    rec = tmp_path / "gpuobs.gpuobs"
    shutil.copy(BLOCK, rec)
    before = digest(rec)
    # the old spelling's trap: `export gpuobs.gpuobs` now reads it, and writes gpuobs.pftrace
    r = clean(gpuobs("export", "gpuobs.gpuobs", cwd=tmp_path))
    assert r.returncode == 0 and digest(rec) == before and (tmp_path / "gpuobs.pftrace").is_file()
    link = tmp_path / "same.gpuobs"
    os.link(rec, link)  # a hard link: another name for the input
    for args in (
        ["trim", rec, "--flushes", "0:1", "-o", link, "-f"],
        ["trim", rec, "--flushes", "0:1", "-o", rec, "-f"],
        ["export", rec, "-o", link, "-f"],
        ["export", rec, "--host", PROFILER, "-o", PROFILER, "-f"],
    ):
        r = clean(gpuobs(*args))
        assert r.returncode == 2 and "gpuobs never writes over what it reads" in r.stderr, args
        assert digest(rec) == before
    shutil.copy(PROFILER, tmp_path / "p.json")
    r = clean(gpuobs("export", SIDE, "--host", tmp_path / "p.json", "-o", tmp_path / "p.json", "-f"))
    assert r.returncode == 2 and "is the input" in r.stderr
    assert digest(tmp_path / "p.json") == digest(PROFILER)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_missing_folder_is_named(writer, tmp_path):
    needs(writer)
    r = clean(gpuobs(*WRITERS[writer](tmp_path / "nope" / f"x{SUFFIX[writer]}")))
    assert r.returncode == 2 and f"folder {tmp_path / 'nope'} does not exist" in r.stderr


# -- a full disk and a read-only folder ----------------------------------------------------------------


@dataclass
class Outcome:
    returncode: int
    stderr: str
    listing: list  # the folder's entries afterwards
    old: bytes  # the previous output afterwards


def _tmpfs_works(tmp_path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=16k tmpfs {probe}"], capture_output=True
    )
    return done.returncode == 0


@pytest.fixture(scope="module")
def tmpfs_available(tmp_path_factory):
    return _tmpfs_works(tmp_path_factory.mktemp("tmpfs-probe"))


def run_in(kind, condition, tmp_path, writer) -> Outcome:
    """Runs WRITER with -f over a previous output in a folder that is `full` (96 KiB)
    or `read-only`: a real tmpfs (`tmpfs`) or the simulation (`simulated`)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    out = folder / f"out{SUFFIX[writer]}"
    args = [str(a) for a in WRITERS[writer](out)] + ["-f"]
    results = tmp_path / "results"
    results.mkdir()
    if kind == "tmpfs":
        remount = f"mount -o remount,ro {folder}" if condition == "read-only" else "true"
        script = "\n".join(
            [
                "set -e",
                f"mount -t tmpfs -o size=96k tmpfs {folder}",
                f"printf %s {shlex.quote(OLD.decode())} > {out}",
                remount,
                "set +e",
                f"{shlex.join(gpuobs_cmd(*args))} 2> {results / 'err'}; echo $? > {results / 'rc'}",
                f"ls -A {folder} > {results / 'ls'}",
                f"cat {out} > {results / 'old'}",
            ]
        )
        subprocess.run(
            ["unshare", "-rm", "bash", "-c", script], env=repo_env(), check=True, timeout=300, stdout=subprocess.DEVNULL
        )
        return Outcome(
            int((results / "rc").read_text()),
            (results / "err").read_text(),
            (results / "ls").read_text().split(),
            (results / "old").read_bytes(),
        )
    out.write_bytes(OLD)
    env = repo_env()
    env["PYTHONPATH"] = f"{HERE / 'fault_injection'}{os.pathsep}{env['PYTHONPATH']}"
    code = errno.ENOSPC if condition == "full" else errno.EROFS
    env["GPUOBS_TEST_FAULT"] = f"{folder}|{code}|{96 * 1024 if condition == 'full' else ''}"
    r = gpuobs(*args, env=env)
    return Outcome(r.returncode, r.stderr, sorted(p.name for p in folder.iterdir()), out.read_bytes())


@pytest.mark.parametrize("kind", ["tmpfs", "simulated"])
@pytest.mark.parametrize(
    "condition,reason", [("full", "no space left on the device"), ("read-only", "the file system is read-only")]
)
@pytest.mark.parametrize("writer", WRITERS)
def test_a_full_or_read_only_folder_loses_nothing(writer, condition, reason, kind, tmp_path, tmpfs_available):
    needs(writer)
    if kind == "tmpfs" and not tmpfs_available:
        pytest.skip("cannot mount a tmpfs here (no root, no user namespaces): the simulated case runs instead")
    got = run_in(kind, condition, tmp_path, writer)
    assert "Traceback" not in got.stderr and "internal error" not in got.stderr, got.stderr
    assert got.returncode == 2 and f"cannot write {tmp_path / 'folder'}/out{SUFFIX[writer]}: {reason}" in got.stderr
    assert got.old == OLD, "the previous output was damaged"
    assert got.listing == [f"out{SUFFIX[writer]}"], f"left behind: {got.listing}"


# -- the helper itself: temp names, links planted at them, interrupted writes --------------------------


def test_temp_names_are_unique_and_a_file_planted_at_one_is_never_opened(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_bytes(OLD)
    names = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(outputs.secrets, "token_hex", lambda _n: next(names))
    planted = tmp_path / f".t.pftrace.{os.getpid()}.aaaa.tmp"
    planted.symlink_to(victim)  # an attacker guessed the first name
    with outputs.write_atomically(tmp_path / "t.pftrace") as fh:
        fh.write(b"new")
    assert (tmp_path / "t.pftrace").read_bytes() == b"new" and victim.read_bytes() == OLD and planted.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.pftrace", "victim", planted.name])


def test_an_interrupted_write_leaves_the_old_file_and_no_temp(tmp_path):
    out = tmp_path / "t.pftrace"
    out.write_bytes(OLD)
    with pytest.raises(KeyboardInterrupt):
        with outputs.write_atomically(out, force=True) as fh:
            fh.write(b"half")
            raise KeyboardInterrupt
    assert out.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == ["t.pftrace"]


def test_an_output_that_appears_while_writing_is_not_replaced(tmp_path):
    out = tmp_path / "t.pftrace"
    with pytest.raises(outputs.OutputError, match="exists; pass -f/--force"):
        with outputs.write_atomically(out) as fh:
            fh.write(b"mine")
            out.write_bytes(OLD)  # someone else's file, created meanwhile
    assert out.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == ["t.pftrace"]


def test_the_written_file_is_whole_and_synced(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(outputs.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with outputs.write_atomically(tmp_path / "t.bin") as fh:
        fh.write(b"x" * 100_000)
    assert (tmp_path / "t.bin").read_bytes() == b"x" * 100_000 and len(synced) >= 1
