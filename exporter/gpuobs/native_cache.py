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
