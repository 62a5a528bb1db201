"""glibc's malloc told to keep the blocks a host-trace export frees for its next
allocations, rather than give each back to the kernel: such an export makes and drops
dozens of numpy columns of a row per event (8-30 MB each on a million-row nsys file) and
encoded buffers of a few MB, and by default every one above malloc's adaptive threshold
(128 KB rising to at most 32 MB) was unmapped or trimmed when freed and its pages
faulted in again when next allocated (a third of the rows export's 125,000 minor faults).
Blocks up to 32 MB come from the heap, and up to 128 MB of free heap top is kept. Not
glibc (musl, macOS, Windows): nothing is asked."""

from __future__ import annotations

import ctypes

from .libc import libc_function

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
MMAP_THRESHOLD = 32 << 20  # glibc's own upper bound for its adaptive threshold
TRIM_THRESHOLD = 128 << 20


def _mallopt():
    return libc_function("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)


def keep_freed_blocks() -> bool:
    """Asks glibc's malloc to keep freed blocks (above); whether it took both settings."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
