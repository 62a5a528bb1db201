"""The cache of compiled parts (gpuobs.native_cache): concurrent builders in
separate processes all end with one good folder and no leftovers; a damaged
file is rebuilt, never loaded; an export whose cache cannot be written falls
back to the numpy encoder with one line, and `record`'s build says why."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuobs import native_cache
from gpuobs.record import native_build
from gpuobs.recording_file import synthetic

EXPORTER = Path(__file__).resolve().parents[1] / "exporter"
LOAD_ENCODER = (
    "from gpuobs.perfetto_export.native_encoder import encoder; import sys; sys.exit(0 if encoder() is not None else 3)"
)
SLOW_BUILD = """
import sys, time
from pathlib import Path
from gpuobs.native_cache import cached_build
def build(folder):
    (folder / "a.bin").write_bytes(b"A" * 100_000)
    time.sleep(0.3)  # every process is building at once
    (folder / "b.bin").write_bytes(b"B" * 100_000)
print(cached_build("demo", ["a.bin", "b.bin"], build))
"""


def env(cache: Path, **more) -> dict:
    e = dict(os.environ, PYTHONPATH=str(EXPORTER), GPUOBS_CACHE=str(cache))
    e.pop("GPUOBS_PURE_PYTHON", None)
    e.update(more)
    return e


def one_pid_each() -> list:
    """A command prefix that runs each process as PID 1 of its own namespace (as
    containers sharing a home do), or None where that is not allowed."""
    prefix = ["unshare", "--pid", "--fork"]
    try:
        ok = subprocess.run(prefix + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else None


def run_together(code: str, cache: Path, n: int, prefix=()):
    procs = [
        subprocess.Popen(
            [*prefix, sys.executable, "-c", code],
            env=env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    return [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]


def leftovers(cache: Path) -> list:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("."))


def test_concurrent_builds_share_one_checked_folder(tmp_path):
    cache = tmp_path / "cache"
    results = run_together(SLOW_BUILD, cache, 6, one_pid_each() or ())
    assert all(code == 0 for code, _, _ in results), results
    assert {out.strip() for _, out, _ in results} == {str(cache / "demo")}
    assert native_cache.verified(cache / "demo", ["a.bin", "b.bin"]) and leftovers(cache) == []


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
@pytest.mark.parametrize("pids", ["distinct", "all 1"])
def test_concurrent_encoder_builds_all_load_it(tmp_path, pids):
    """8 exports compiling the encoder at once. Temp files were named by PID: processes
    with the same PID number (each in its own namespace) raised FileNotFoundError."""
    prefix = () if pids == "distinct" else one_pid_each()
    if prefix is None:
        pytest.skip("cannot run processes in their own PID namespace here")
    cache = tmp_path / "cache"
    results = run_together(LOAD_ENCODER, cache, 8, prefix)
    assert [code for code, _, _ in results] == [0] * 8, results
    folders = [p for p in cache.iterdir() if p.name.startswith("encoder-")]
    assert len(folders) == 1 and leftovers(cache) == []


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
@pytest.mark.parametrize("damage", ["truncated", "altered manifest", "manifest missing"])
def test_a_damaged_cached_encoder_is_rebuilt_not_loaded(tmp_path, damage):
    cache = tmp_path / "cache"
    assert subprocess.run([sys.executable, "-c", LOAD_ENCODER], env=env(cache)).returncode == 0
    folder = next(cache.glob("encoder-*"))
    library = folder / "native_encoder.so"
    good = library.read_bytes()
    if damage == "truncated":
        library.write_bytes(good[: len(good) // 3])  # a build that died half way, under the old scheme
    elif damage == "altered manifest":
        (folder / native_cache.MANIFEST).write_text('{"native_encoder.so": "0000"}')
    else:
        (folder / native_cache.MANIFEST).unlink()
    assert not native_cache.verified(folder, ["native_encoder.so"])
    assert subprocess.run([sys.executable, "-c", LOAD_ENCODER], env=env(cache)).returncode == 0
    assert native_cache.verified(folder, ["native_encoder.so"]) and library.read_bytes() == good
    assert leftovers(cache) == []


def test_export_without_a_writable_cache_uses_numpy_and_says_so_once(tmp_path):
    rec = synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=3, blocks_per_launch=64)
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a cache folder cannot be made under a file, even by root
    for home_only in (False, True):
        out = tmp_path / f"t{home_only}.pftrace"
        e = env(blocker / "cache")
        if home_only:  # no GPUOBS_CACHE and an unusable home
            del e["GPUOBS_CACHE"]
            e["HOME"] = str(blocker)
        proc = subprocess.run(
            [sys.executable, "-m", "gpuobs", "export", str(rec), "-o", str(out)],
            env=e,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        said = [line for line in proc.stderr.splitlines() if "encoder cache" in line]
        assert len(said) == 1 and "numpy encoder" in said[0]
    pure = tmp_path / "pure.pftrace"
    subprocess.run(
        [sys.executable, "-m", "gpuobs", "export", str(rec), "-o", str(pure)],
        check=True,
        env=env(tmp_path / "unused", GPUOBS_PURE_PYTHON="1"),
        capture_output=True,
    )
    assert (tmp_path / "tFalse.pftrace").read_bytes() == pure.read_bytes()


def test_tool_build_into_an_unwritable_cache_says_why(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GPUOBS_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(
        native_build, "find_toolchain", lambda: native_build.Toolchain("nvcc", "g++", tmp_path, tmp_path)
    )
    monkeypatch.setattr(native_build, "_source_hash", lambda tc: "0123456789abcdef")
    with pytest.raises(native_build.NativeUnavailable, match="cannot build into the cache .*GPUOBS_CACHE"):
        native_build.build()
