"""The cache of what gpuobs compiles (the host tool, the device patches, the export
encoder): one folder per source hash, filled whole or not at all.

A build happens in a folder of its own with a unique name (processes that share a
PID number, in containers sharing a home, cannot collide), ends with a manifest of
every file's SHA-256, and is renamed into place in one step; when another process
got there first, its folder is kept and ours discarded. What is handed out has
been checked against its manifest, so a truncated or altered file is rebuilt
instead of loaded."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Callable

MANIFEST = "manifest.json"
PLACE_ATTEMPTS = 3


def cache_root() -> Path:
    return Path(os.environ.get("GPUOBS_CACHE", Path.home() / ".cache" / "gpuobs"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verified(folder: Path, names: list[str]) -> bool:
    """Every file in `names` is there with the content its manifest records."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        return all(isinstance(manifest.get(n), str) and _sha256(folder / n) == manifest[n] for n in names)
    except (OSError, ValueError):
        return False


def cached_build(key: str, names: list[str], build: Callable[[Path], None], force: bool = False) -> Path:
    """The folder cache_root()/key holding `names`: checked and reused, or made by
    build(folder), which writes them into the empty folder it is given. Raises
    OSError when the cache cannot be written, and what `build` raises."""
    root = cache_root()
    final = root / key
    if not force and verified(final, names):
        return final
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.build-", dir=root))
    try:
        build(work)
        manifest = {n: _sha256(work / n) for n in names}
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
        for _ in range(PLACE_ATTEMPTS):
            try:
                os.rename(work, final)  # atomic; fails when `final` exists and is not empty
                return final
            except OSError:
                if not force and verified(final, names):
                    return final  # another process placed a good one first
            # `final` is stale, damaged or being replaced (--force): move it aside, then retry
            aside = root / f".{key}.old-{uuid.uuid4().hex}"
            try:
                os.rename(final, aside)
                shutil.rmtree(aside, ignore_errors=True)
            except OSError:
                pass  # someone else moved it
            force = False
        if verified(final, names):
            return final
        raise OSError(f"cannot put the build into {final}: other processes keep replacing it")
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


class _CompileFailed(Exception):
    pass


def compiled_library(ffi, key: str, source: Path, headers: tuple = (), cache_warning: str = ""):
    """`source` (C) compiled on first use with the host C compiler into the cache
    (`key`-hash of the source, the headers and the compiler) and loaded through
    `ffi`; None with GPUOBS_PURE_PYTHON=1, without a compiler, or where it cannot be
    built or loaded: the callers keep a Python path that gives the same results.
    Each header's folder is on the include path. `cache_warning`, if given, is
    printed (with the cache and why) when only the cache stood in the way."""
    if os.environ.get("GPUOBS_PURE_PYTHON") == "1":
        return None
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or not source.is_file() or not all(h.is_file() for h in headers):
        return None
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in (source, *headers)) + cc.encode()).hexdigest()[:16]
    library = source.with_suffix(".so").name
    includes = [arg for h in headers for arg in ("-I", str(h.parent))]

    def compile_into(folder: Path) -> None:
        cmd = [cc, "-O2", "-shared", "-fPIC", *includes, "-o", str(folder / library), str(source)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise _CompileFailed(proc.stderr.strip() or f"{cc} failed")

    try:
        folder = cached_build(f"{key}-{digest}", [library], compile_into)
    except _CompileFailed:
        return None
    except OSError as exc:
        if cache_warning:
            why = exc.strerror or exc
            print(f"gpuobs: cannot use the {key} cache {cache_root()} ({why}); {cache_warning}", file=sys.stderr)
        return None
    try:
        return ffi.dlopen(str(folder / library))
    except OSError:
        return None


def compiled_with_schema(ffi, key: str, source: Path):
    """compiled_library for a helper that includes the schema header (gpuobs_schema.h);
    None where an install lacks the header, as where it cannot be built."""
    from .native_sources import NativeSourcesMissing, schema_header

    try:
        header = schema_header()
    except (OSError, NativeSourcesMissing):  # an install without the header: the Python path
        return None
    return compiled_library(ffi, key, source, (header,))
