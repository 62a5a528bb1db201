"""chunk_walk.c, the reader's walk over chunk frames (each header and payload in the
file, each CRC-32 holding), compiled on first use with the host C compiler and loaded
through cffi, as event_index.c is. Where it cannot be built (or GPUOBS_PURE_PYTHON=1)
the reader walks the frames in Python: the same chunks, the same errors (tests)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from cffi import FFI

from ..native_cache import compiled_with_schema

SOURCE = Path(__file__).with_name("chunk_walk.c")
BATCH = 1 << 16  # chunks walked per call
END, FULL, STOPPED = 0, 1, 2
_FFI = FFI()
_FFI.cdef("""
int64_t gpuobs_walk_chunks(const uint8_t* buf, uint64_t size, uint64_t offset, uint64_t end, uint64_t unchecked,
                           uint64_t* offsets, uint32_t* types, uint64_t* lengths, int64_t max_chunks, uint64_t* next,
                           int32_t* status);
""")


@lru_cache(maxsize=1)
def library():
    """The loaded library, or None where it cannot be built or cached here."""
    return compiled_with_schema(_FFI, "chunk-walk", SOURCE)


class Walk:
    """Walks a buffer a BATCH of chunks at a time: `walk(offset, end)` gives (offsets,
    types, lengths, next offset, status) as chunk_walk.c walked them."""

    def __init__(self, lib, data: np.ndarray, unchecked: int):
        self.lib, self.data, self.unchecked = lib, data, unchecked
        self.offsets = np.empty(BATCH, np.uint64)
        self.types = np.empty(BATCH, np.uint32)
        self.lengths = np.empty(BATCH, np.uint64)
        self.next = np.zeros(1, np.uint64)
        self.status = np.zeros(1, np.int32)

    def walk(self, offset: int, end: int) -> tuple:
        n = self.lib.gpuobs_walk_chunks(
            _FFI.cast("const uint8_t*", self.data.ctypes.data),
            len(self.data),
            offset,
            end,
            self.unchecked,
            _FFI.cast("uint64_t*", self.offsets.ctypes.data),
            _FFI.cast("uint32_t*", self.types.ctypes.data),
            _FFI.cast("uint64_t*", self.lengths.ctypes.data),
            BATCH,
            _FFI.cast("uint64_t*", self.next.ctypes.data),
            _FFI.cast("int32_t*", self.status.ctypes.data),
        )
        return self.offsets[:n], self.types[:n], self.lengths[:n], int(self.next[0]), int(self.status[0])
