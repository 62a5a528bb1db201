"""A text_pool.h pool read into Python: its texts, in id order, as bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HEADER = Path(__file__).with_name("text_pool.h")  # in the C readers' cache keys: they include it


def pooled_texts(ffi, count: int, pool, offsets) -> list[bytes]:
    """Text i is pool[offsets[i] .. offsets[i + 1]) (`pool` and `offsets` as the C side hands them)."""
    if not count:
        return []
    bounds = np.frombuffer(ffi.buffer(offsets, (count + 1) * 8), np.int64).tolist()
    data = bytes(ffi.buffer(pool, bounds[-1])) if bounds[-1] else b""
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]
