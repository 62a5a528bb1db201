"""Framing of the .gpuobs file, shared by the reader and the Python writer.

A file is a header then chunks; each chunk is a gpuobs_chunk_header followed by
`length` payload bytes, its CRC-32 covering the header's first 16 bytes and the
payload. All integers are little-endian. The C++ tool writes the same framing
(tool/recording_file.cpp); schemas/recording-format.md is the spec."""

from __future__ import annotations

import zlib

import numpy as np

from . import schema

MAGIC = b"GPUOBS\r\n"
FILE_HEADER = schema.dtype("gpuobs_file_header")
CHUNK_HEADER = schema.dtype("gpuobs_chunk_header")
EVENTS_HEADER = schema.dtype("gpuobs_events_header")
EVENT_ALIGN = 64
CRC_COVERED_HEADER_BYTES = 16  # type, flags, length


def chunk_crc(header_prefix: bytes | memoryview, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(header_prefix)) & 0xFFFFFFFF


def pack_file_header(tool_version: str) -> bytes:
    header = np.zeros(1, FILE_HEADER)
    header["magic"] = MAGIC
    header["format_version"] = schema.FORMAT_VERSION
    header["header_size"] = FILE_HEADER.itemsize
    header["schema_hash"] = schema.SCHEMA_HASH
    header["tool_version"] = tool_version.encode()[:31]
    return header.tobytes()


def pack_chunk(chunk_type: int, payload: bytes, flags: int = 0) -> bytes:
    header = np.zeros(1, CHUNK_HEADER)
    header["type"] = chunk_type
    header["flags"] = flags
    header["length"] = len(payload)
    prefix = header.tobytes()[:CRC_COVERED_HEADER_BYTES]
    header["crc32"] = chunk_crc(prefix, payload)
    return header.tobytes() + payload


def events_padding(chunk_start_offset: int) -> int:
    """Zero bytes after the events header so the first event is 64-byte aligned in the file."""
    first = chunk_start_offset + CHUNK_HEADER.itemsize + EVENTS_HEADER.itemsize
    return (-first) % EVENT_ALIGN
