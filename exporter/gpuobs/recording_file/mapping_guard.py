"""Memory maps of input files that a truncation cannot crash.

The reader maps a recording and hands out views of the map. If another process
truncates the file meanwhile, touching a page past its new end raises SIGBUS, which
Python cannot catch (the kernel retries the access, and the process died with exit
135, no message and its temp output left). mapping_guard.c, compiled on first use
like the export encoder, turns such a fault in a guarded map into zero pages and
counts it; `check()` then raises InputTruncated, and the reader, the output writer
(before a file is renamed into place) and the CLI (before it prints, and at exit)
ask it, so the zeros are never trusted: one `gpuobs:` line, exit 2, nothing written.

A shrink that faults nothing (a cut inside the last page reads zeros without a
fault) is seen by comparing the file's size, through a descriptor kept open for
the map's life, with the size mapped. Without a C compiler (or with
GPUOBS_PURE_PYTHON=1) the file is read into memory instead of mapped."""

from __future__ import annotations

import mmap
import os
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cffi import FFI

from ..errors import RecordingError
from ..native_cache import compiled_library

SOURCE = Path(__file__).with_name("mapping_guard.c")
_FFI = FFI()
_FFI.cdef("""
int gpuobs_guard_install(void);
int gpuobs_guard_add(uintptr_t start, size_t length);
void gpuobs_guard_remove(int slot);
long gpuobs_guard_faults(int slot);
""")


class InputTruncated(RecordingError):
    """An input file became shorter than what was mapped of it while gpuobs read it."""


@dataclass
class _Mapped:
    path: str
    fd: int  # our own descriptor of the file: its size now, whatever its name became
    length: int
    slot: int  # in mapping_guard.c's table; -1: unguarded (no compiler)


_live: dict[int, _Mapped] = {}


@lru_cache(maxsize=1)
def _library():
    """The installed SIGBUS handler's library, or None where it cannot be built."""
    lib = compiled_library(_FFI, "mapping-guard", SOURCE)
    return lib if lib is not None and lib.gpuobs_guard_install() == 0 else None


def map_file(fh, path):
    """A read-only buffer of the whole file open as `fh` (a file or a descriptor): a
    guarded memory map, or, where the handler cannot be built, the file's bytes read
    into memory (a copy that nothing can cut short; a read that comes up short raises
    InputTruncated)."""
    fd = fh if isinstance(fh, int) else fh.fileno()
    if _library() is not None:
        buf = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        guard(buf, fd, path)
        return buf
    size = os.fstat(fd).st_size
    data = bytearray(size)
    done, view = 0, memoryview(data)
    while done < size:
        n = os.preadv(fd, [view[done:]], done)
        if n <= 0:
            raise InputTruncated(path, done, f"the file was truncated from {size:,} bytes while gpuobs read it")
        done += n
    return memoryview(data).toreadonly()  # not copied again


def guard(buf: mmap.mmap, fd: int, path) -> None:
    """Guards `buf`, a read-only map of the file open as `fd`, for as long as it lives."""
    if len(buf) == 0:
        return
    lib = _library()
    slot = -1
    if lib is not None:
        start = int(_FFI.cast("uintptr_t", _FFI.from_buffer(buf)))
        slot = lib.gpuobs_guard_add(start, len(buf))
    entry = _Mapped(str(path), os.dup(fd), len(buf), slot)
    key = id(entry)
    _live[key] = entry
    weakref.finalize(buf, _forget, key)


def _forget(key: int) -> None:
    """The map is gone; what was read from it may live on (a report being printed), so
    a fault in it is still said by the next check()."""
    entry = _live.pop(key, None)
    if entry is None:
        return
    try:
        cut = _cut(entry, by_size=False)
    finally:
        if entry.slot >= 0:
            _library().gpuobs_guard_remove(entry.slot)
        os.close(entry.fd)
    if cut is not None:
        _cut_short.append(cut)


_cut_short: list[InputTruncated] = []  # faults in maps already gone


def _cut(entry: _Mapped, by_size: bool) -> InputTruncated | None:
    faulted = entry.slot >= 0 and _library().gpuobs_guard_faults(entry.slot) > 0
    size = os.fstat(entry.fd).st_size
    if not (faulted or (by_size and size < entry.length)):
        return None
    return InputTruncated(
        entry.path,
        size,
        f"the file was truncated from {entry.length:,} to {size:,} bytes while gpuobs read it "
        "(another process cut it short); nothing was written from it",
    )


def check(just_read=None) -> None:
    """Raises InputTruncated when zeros were read from a guarded map of a file cut short
    (each such cut is said once). `just_read`: the path of the map just made, whose
    size is compared too (a cut inside its last page faults nothing). A map that only
    became shorter is not an error by itself: a long-lived process may hold the map of
    a file since rewritten, and read nothing more from it."""
    if _cut_short:
        raise _cut_short.pop(0)
    named = None if just_read is None else str(Path(just_read))
    newest = next((e for e in reversed(_live.values()) if e.path == named), None) if named else None
    for entry in list(_live.values()):
        cut = _cut(entry, by_size=entry is newest)
        if cut is not None:
            raise cut
