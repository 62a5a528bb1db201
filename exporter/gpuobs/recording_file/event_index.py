"""event_index.c, the windowed reader's one-pass index of a run of events (and
overlap_bound.py's count of blocks per time bin), compiled on
first use with the host C compiler (as mapping_guard.c and the export encoder are) and
loaded through cffi. Without a compiler, or with GPUOBS_PURE_PYTHON=1, windows.py
computes the same figures with numpy (tests/test_streamed_analysis.py holds them equal)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from cffi import FFI

from ..native_cache import compiled_with_schema

SOURCE = Path(__file__).with_name("event_index.c")
_FFI = FFI()
_FFI.cdef("""
void gpuobs_index_events(const void* ev, size_t n, size_t first_row, size_t zone_rows, size_t zone_count,
                         uint64_t* figures, int64_t* kinds, uint8_t* slots, uint32_t slot_limit, uint64_t* zones);
void gpuobs_overlap_bins(const void* ev, size_t n, uint64_t sm_row, uint64_t bins, uint64_t t0, uint64_t width,
                         uint32_t block_kind, uint32_t late_flag, int64_t* diff);
""")


@lru_cache(maxsize=1)
def library():
    """The loaded library, or None where it cannot be built or cached here."""
    return compiled_with_schema(_FFI, "event-index", SOURCE)


def _ptr(kind: str, array: np.ndarray):
    return _FFI.cast(kind, array.ctypes.data)


def index_events(lib, ev: np.ndarray, first_row: int, zone_rows: int, figures, kinds, slots, zones) -> None:
    """gpuobs_index_events over `ev` (contiguous events), updating the arrays in place."""
    lib.gpuobs_index_events(
        _FFI.cast("const void*", ev.ctypes.data),
        len(ev),
        first_row,
        zone_rows,
        zones.shape[1],
        _ptr("uint64_t*", figures),
        _ptr("int64_t*", kinds),
        _ptr("uint8_t*", slots),
        len(slots) - 1,
        _ptr("uint64_t*", zones),
    )


def overlap_bins(lib, ev: np.ndarray, sm_row: int, bins: int, t0: int, width: int, diff: np.ndarray) -> None:
    """gpuobs_overlap_bins over the events `ev` of one device, adding to `diff` in place."""
    from . import schema

    ev = np.ascontiguousarray(ev)
    lib.gpuobs_overlap_bins(
        _FFI.cast("const void*", ev.ctypes.data),
        len(ev),
        sm_row,
        bins,
        t0,
        width,
        int(schema.EventKind.BLOCK),
        int(schema.BLOCK_END_UNCONFIRMED),
        _ptr("int64_t*", diff),
    )
