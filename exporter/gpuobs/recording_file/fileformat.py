"""Framing of the .gpuobs file, shared by the reader and the Python writer.

A file is a header then chunks; each chunk is a gpuobs_chunk_header followed by
`length` payload bytes, its CRC-32 covering the header's first 16 bytes and the
payload. All integers are little-endian. The C++ tool writes the same framing
(tool/recording_file.cpp); schemas/recording-format.md is the spec."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ..errors import GpuobsError
from ..input_files import open_regular
from . import schema

MAGIC = b"GPUOBS\r\n"
FILE_HEADER = schema.dtype("gpuobs_file_header")
CHUNK_HEADER = schema.dtype("gpuobs_chunk_header")
EVENTS_HEADER = schema.dtype("gpuobs_events_header")
EVENT_ALIGN = 64
CRC_COVERED_HEADER_BYTES = 16  # type, flags, length


def chunk_crc(header_prefix: bytes | memoryview, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(header_prefix)) & 0xFFFFFFFF


class NotARecording(GpuobsError, ValueError):
    """Not a gpuobs recording (recording_pid): a file beside a run's that is no child's."""


RUN_SEARCH_CHUNKS = 64  # the tool writes its RUN chunk first; a few chunks may come before one's copy's


def recording_pid(path) -> int | None:
    """The pid in a recording's RUN chunk, read from its first chunks without loading
    it; None for a recording with no RUN chunk yet (a process that ended before its
    first CUDA context). Raises NotARecording for anything else: not a regular file,
    not a gpuobs header, a damaged chunk before the RUN chunk."""
    run = run_info(path)
    return None if run is None else int(run["pid"])


def run_info(path):
    """A recording's gpuobs_run_info, read from its first chunks as recording_pid reads
    them; None without a RUN chunk there. Raises NotARecording as recording_pid does."""
    head = struct.Struct("<IIQI")  # type, flags, length, crc32
    try:
        with open_regular(path) as fh:
            if fh.read(FILE_HEADER.itemsize)[: len(MAGIC)] != MAGIC:
                raise NotARecording(f"{path}: not a gpuobs recording")
            for _ in range(RUN_SEARCH_CHUNKS):
                raw = fh.read(CHUNK_HEADER.itemsize)
                if len(raw) < CHUNK_HEADER.itemsize:
                    return None  # ends before a RUN chunk
                ctype, _flags, length, crc = head.unpack_from(raw)
                if ctype != schema.ChunkType.RUN:
                    fh.seek(length, 1)
                    continue
                run_info = schema.dtype("gpuobs_run_info")
                payload = fh.read(min(length, run_info.itemsize + (8 << 20)))
                if len(payload) != length or chunk_crc(raw[:CRC_COVERED_HEADER_BYTES], payload) != crc:
                    raise NotARecording(f"{path}: its RUN chunk is damaged")
                if length < run_info.itemsize:
                    raise NotARecording(f"{path}: its RUN chunk is short")
                return np.frombuffer(payload, run_info, 1)[0]
    except OSError as exc:
        raise NotARecording(f"{path}: {exc.strerror or exc}") from None
    return None


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
