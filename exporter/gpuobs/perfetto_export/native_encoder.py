"""The C block-packet encoder (native_encoder.c), compiled on first use with the
host C compiler and loaded through cffi. Without a compiler, or with
GPUOBS_PURE_PYTHON=1, the exporter uses the numpy encoder, which writes the same
bytes (tests/test_export.py checks they are identical)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
from cffi import FFI

from ..native_cache import cache_root, cached_build

SOURCE = Path(__file__).with_name("native_encoder.c")
_FFI = FFI()
_FFI.cdef("""
size_t gpuobs_encode_blocks(uint8_t* out, size_t n, const int64_t* event, const uint64_t* ts,
                            const uint8_t* begin, const uint64_t* track, const uint64_t* name_iid,
                            const uint64_t* seq, const uint32_t* bx, const uint16_t* by, const uint16_t* bz,
                            const int64_t* launch, int with_args, uint64_t flags);
long gpuobs_assign_lanes(size_t n, const int64_t* group, const uint64_t* start, const uint64_t* end,
                         int64_t* lane_out, uint64_t* lane_free_at, long max_lanes);
""")
MAX_LANES = 4096


LIBRARY = "native_encoder.so"


@lru_cache(maxsize=1)
def encoder():
    """The loaded library, or None when it cannot be built or cached here (then the
    numpy encoder writes the same bytes; a cache that cannot be written says so once)."""
    if os.environ.get("GPUOBS_PURE_PYTHON") == "1":
        return None
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or not SOURCE.is_file():
        return None
    digest = hashlib.sha256(SOURCE.read_bytes() + cc.encode()).hexdigest()[:16]

    def compile_into(folder: Path) -> None:
        proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(folder / LIBRARY), str(SOURCE)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise _CompileFailed(proc.stderr.strip())

    try:
        folder = cached_build(f"encoder-{digest}", [LIBRARY], compile_into)
    except _CompileFailed:
        return None
    except OSError as exc:
        print(f"gpuobs: cannot use the encoder cache {cache_root()} ({exc.strerror or exc}); exporting with the "
              "numpy encoder (same trace, slower). Set GPUOBS_CACHE to a writable folder to speed it up.",
              file=sys.stderr)
        return None
    try:
        return _FFI.dlopen(str(folder / LIBRARY))
    except OSError:
        return None


class _CompileFailed(Exception):
    pass


def _ptr(kind: str, array: np.ndarray):
    return _FFI.cast(kind, array.ctypes.data)


def assign_lanes_sorted(group: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Lanes for intervals already sorted by (group, start); None past MAX_LANES."""
    lib = encoder()
    group = np.ascontiguousarray(group, np.int64)
    start = np.ascontiguousarray(start, np.uint64)
    end = np.ascontiguousarray(end, np.uint64)
    lanes = np.empty(len(group), np.int64)
    free_at = np.zeros(MAX_LANES, np.uint64)
    width = lib.gpuobs_assign_lanes(len(group), _ptr("int64_t*", group), _ptr("uint64_t*", start),
                                    _ptr("uint64_t*", end), _ptr("int64_t*", lanes), _ptr("uint64_t*", free_at),
                                    MAX_LANES)
    return None if width < 0 else lanes


def encode_blocks(event, ts, begin, track, seq, name_iid, bx, by, bz, launch, with_args: bool,
                  flags: int) -> np.ndarray:
    """Packets i take ts/begin/track/seq[i]; the per-block columns are read at event[i]."""
    lib = encoder()
    arrays = [np.ascontiguousarray(event, np.int64), np.ascontiguousarray(ts, np.uint64),
              np.ascontiguousarray(begin, np.uint8), np.ascontiguousarray(track, np.uint64),
              np.ascontiguousarray(name_iid, np.uint64), np.ascontiguousarray(seq, np.uint64),
              np.ascontiguousarray(bx, np.uint32), np.ascontiguousarray(by, np.uint16),
              np.ascontiguousarray(bz, np.uint16), np.ascontiguousarray(launch, np.int64)]
    kinds = ["int64_t*", "uint64_t*", "uint8_t*", "uint64_t*", "uint64_t*", "uint64_t*", "uint32_t*",
             "uint16_t*", "uint16_t*", "int64_t*"]
    ptrs = [_ptr(k, a) for k, a in zip(kinds, arrays)]
    n = len(arrays[0])
    size = lib.gpuobs_encode_blocks(_FFI.NULL, n, *ptrs, int(with_args), flags)
    out = np.empty(size, np.uint8)
    written = lib.gpuobs_encode_blocks(_FFI.cast("uint8_t*", out.ctypes.data), n, *ptrs, int(with_args), flags)
    assert written == size
    return out
