"""Packed chunks (gpuobs_chunk_header.flags & GPUOBS_CHUNK_SHUFFLED_ZLIB): a table's
rows byte-shuffled (byte k of every row together, as Blosc does) and deflated. The
tool packs the launch metadata it writes at every flush (tool/chunk_compress.cpp);
launch rows of a graph replay differ in a few bytes each, so shuffled they deflate
~20x where the raw rows deflate ~6x.

Payload: gpuobs_packed_header (raw_length, row_size, head_size), head_size bytes as
they are (FLUSH keeps its gpuobs_flush_info there), then the zlib stream of the rows.
`unpack` refuses a payload whose header lies before inflating anything, and never
inflates past the raw_length it declared (schemas/recording-format.md)."""

from __future__ import annotations

import zlib

import numpy as np

from ..errors import GpuobsError
from . import schema

PACKED_HEADER = schema.dtype("gpuobs_packed_header")
SHUFFLED_ZLIB = int(schema.ChunkFlag.SHUFFLED_ZLIB)
KNOWN_FLAGS = SHUFFLED_ZLIB
# The chunks that may be packed: (row struct, struct stored as it is before the rows).
PACKABLE = {
    schema.ChunkType.LAUNCHES: ("gpuobs_launch", None),
    schema.ChunkType.FLUSH: ("gpuobs_launch_count", "gpuobs_flush_info"),
    schema.ChunkType.API_CALLS: ("gpuobs_api_call", None),
}
# deflate cannot do better than 1032:1 (258-byte matches of a few bits each): a
# raw_length past it is a lie, refused before anything is allocated.
MAX_INFLATE_RATIO = 1032


class PackError(GpuobsError, ValueError):
    """A packed payload that does not unpack to what its header says (the reader says it
    as a CorruptChunk naming the file and the chunk)."""


def layout(chunk_type: int) -> tuple[int, int]:
    """(row size, head size) of a packable chunk type's payload."""
    row, head = PACKABLE[chunk_type]
    return schema.dtype(row).itemsize, schema.dtype(head).itemsize if head else 0


def shuffle(rows, row_size: int) -> np.ndarray:
    """Rows' bytes regrouped by position: every row's byte 0, then every row's byte 1, ..."""
    data = np.frombuffer(rows, np.uint8)
    return np.ascontiguousarray(data.reshape(-1, row_size).T).reshape(-1)


def pack(payload: bytes, chunk_type: int, level: int = 1) -> bytes | None:
    """The packed payload of a chunk, or None where packing would not make it smaller."""
    row_size, head_size = layout(chunk_type)
    if len(payload) < head_size or (len(payload) - head_size) % row_size:
        raise ValueError(f"{len(payload)} bytes are not a {head_size}-byte head and {row_size}-byte rows")
    header = np.zeros(1, PACKED_HEADER)
    header["raw_length"], header["row_size"], header["head_size"] = len(payload), row_size, head_size
    stream = zlib.compress(shuffle(payload[head_size:], row_size).tobytes(), level)
    packed = header.tobytes() + payload[:head_size] + stream
    return packed if len(packed) < len(payload) else None


def unpack(stored, chunk_type: int) -> np.ndarray:
    """The payload a packed chunk of `chunk_type` holds (uint8 array), checked against
    its header: raises PackError saying what does not hold."""
    row_size, head_size = layout(chunk_type)
    stored = memoryview(stored)
    at = PACKED_HEADER.itemsize
    if len(stored) < at:
        raise PackError(f"packed payload of {len(stored)} bytes is shorter than its {at}-byte header")
    header = np.frombuffer(stored, PACKED_HEADER, 1)[0]
    raw_length, rows, head = int(header["raw_length"]), int(header["row_size"]), int(header["head_size"])
    if (rows, head) != (row_size, head_size):
        raise PackError(
            f"packed as {rows}-byte rows after a {head}-byte head; its rows are {row_size} bytes "
            f"after a {head_size}-byte head"
        )
    if raw_length < head or (raw_length - head) % rows:
        raise PackError(f"raw_length {raw_length} is not the {head}-byte head and whole {rows}-byte rows")
    if len(stored) < at + head:
        raise PackError(f"packed payload of {len(stored)} bytes ends inside its {head}-byte head")
    stream = stored[at + head :]
    want = raw_length - head
    if want > MAX_INFLATE_RATIO * len(stream):
        raise PackError(
            f"raw_length {raw_length:,} is more than deflate's {MAX_INFLATE_RATIO}:1 makes of a "
            f"{len(stream):,}-byte stream"
        )
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(stream, want + 1)  # a byte past raw_length says it lied
    except zlib.error as exc:
        raise PackError(f"its zlib stream is damaged ({exc})") from None
    if len(inflated) > want:
        raise PackError(f"its zlib stream inflates past raw_length {raw_length:,}")
    if len(inflated) < want or not inflater.eof:
        raise PackError(f"its zlib stream ends after {len(inflated):,} of the {want:,} bytes raw_length promises")
    if inflater.unused_data:
        raise PackError(f"{len(inflater.unused_data)} bytes follow its zlib stream")
    out = np.empty(raw_length, np.uint8)
    out[:head] = np.frombuffer(stored, np.uint8, head, at)
    out[head:].reshape(-1, rows)[:] = np.frombuffer(inflated, np.uint8).reshape(rows, -1).T
    return out
