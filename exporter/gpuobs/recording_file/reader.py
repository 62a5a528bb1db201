"""Reads .gpuobs recordings: `load(path)` returns a Recording whose event arrays
are zero-copy views over the file's memory map.

Damage is reported with the file, the byte offset and what was expected;
`salvage=True` keeps every complete chunk before the damage instead."""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from . import schema
from ..errors import (
    BadMagic,
    CorruptChunk,
    RecordingError,
    SchemaMismatch,
    TruncatedChunk,
    UnsupportedVersion,
)
from .fileformat import (
    CHUNK_HEADER,
    CRC_COVERED_HEADER_BYTES,
    EVENTS_HEADER,
    FILE_HEADER,
    MAGIC,
    chunk_crc,
)
from .recording import LAUNCH_COUNT_ROW, Damage, FunctionInfo, Notice, Recording, RunInfo

ChunkType = schema.ChunkType


def load(path, salvage: bool = False) -> Recording:
    """Read a recording. Raises a RecordingError subclass on damage unless salvage=True."""
    path = Path(path)
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise RecordingError(path, 0, f"cannot open: {exc.strerror}") from exc
    if size == 0:
        raise TruncatedChunk(path, 0, f"file is empty; expected a {FILE_HEADER.itemsize}-byte gpuobs header")
    with open(path, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return _Parser(path, buf, salvage).parse()


class _Parser:
    def __init__(self, path: Path, buf: mmap.mmap, salvage: bool):
        self.path = path
        self.buf = buf
        self.view = memoryview(buf)
        self.salvage = salvage
        self.launch_parts: list[np.ndarray] = []
        self.launch_flush_parts: list[np.ndarray] = []
        self.clock_parts: list[np.ndarray] = []
        self.flush_parts: list[np.ndarray] = []
        self.count_parts: list[np.ndarray] = []
        self.device_parts: list[np.ndarray] = []
        self.module_parts: list[np.ndarray] = []
        self.api_parts: list[np.ndarray] = []

    # -- header ---------------------------------------------------------------
    def _header(self) -> Recording:
        size = len(self.buf)
        if size < FILE_HEADER.itemsize:
            if self.buf[: min(size, len(MAGIC))] != MAGIC[:size]:
                raise BadMagic(self.path, 0, f"expected magic {MAGIC!r}, found {bytes(self.buf[:8])!r}")
            raise TruncatedChunk(
                self.path, 0, f"file of {size} bytes is shorter than the {FILE_HEADER.itemsize}-byte header"
            )
        header = np.frombuffer(self.buf, FILE_HEADER, 1, 0)[0]
        if bytes(header["magic"]) != MAGIC.rstrip(b"\0"):
            raise BadMagic(self.path, 0, f"expected magic {MAGIC!r}, found {bytes(self.buf[:8])!r}: not a gpuobs recording")
        version = int(header["format_version"])
        if version != schema.FORMAT_VERSION:
            raise UnsupportedVersion(
                self.path, 8, f"format version {version}; this gpuobs reads version {schema.FORMAT_VERSION}"
            )
        if int(header["header_size"]) != FILE_HEADER.itemsize:
            raise CorruptChunk(
                self.path, 12, f"header size {int(header['header_size'])}, expected {FILE_HEADER.itemsize}"
            )
        schema_hash = int(header["schema_hash"])
        if schema_hash != schema.SCHEMA_HASH and schema_hash not in schema.COMPATIBLE_SCHEMAS:
            raise SchemaMismatch(
                self.path,
                16,
                f"schema hash {schema_hash:#018x}, expected {schema.SCHEMA_HASH:#018x}: "
                "written by a gpuobs with a different record layout",
            )
        return Recording(
            path=str(self.path),
            format_version=version,
            schema_hash=schema_hash,
            tool_version=bytes(header["tool_version"]).decode(errors="replace"),
        )

    # -- chunks ---------------------------------------------------------------
    def parse(self) -> Recording:
        rec = self._header()
        offset = FILE_HEADER.itemsize
        size = len(self.buf)
        while offset < size:
            try:
                offset = self._chunk(rec, offset)
            except RecordingError as err:
                if not self.salvage:
                    raise
                rec.damage = Damage(offset=err.offset, reason=err.reason, bytes_lost=size - offset)
                break
        self._finish(rec)
        return rec

    def _chunk(self, rec: Recording, offset: int) -> int:
        size = len(self.buf)
        if offset + CHUNK_HEADER.itemsize > size:
            raise TruncatedChunk(
                self.path, offset,
                f"chunk header needs {CHUNK_HEADER.itemsize} bytes, only {size - offset} remain (truncated tail)",
            )
        header = np.frombuffer(self.buf, CHUNK_HEADER, 1, offset)[0]
        ctype, length = int(header["type"]), int(header["length"])
        start = offset + CHUNK_HEADER.itemsize
        if length > size - start:
            raise TruncatedChunk(
                self.path, offset,
                f"{_type_name(ctype)} chunk declares {length} payload bytes, only {size - start} remain (truncated tail)",
            )
        payload = self.view[start : start + length]
        expected = int(header["crc32"])
        found = chunk_crc(self.view[offset : offset + CRC_COVERED_HEADER_BYTES], payload)
        if found != expected:
            raise CorruptChunk(
                self.path, offset,
                f"{_type_name(ctype)} chunk fails its CRC-32 (stored {expected:#010x}, computed {found:#010x})",
            )
        try:
            self._decode(rec, ctype, start, length)
        except _PayloadError as err:
            raise CorruptChunk(self.path, offset, f"{_type_name(ctype)} chunk: {err}") from None
        return start + length

    def _decode(self, rec: Recording, ctype: int, start: int, length: int) -> None:
        if ctype == ChunkType.EVENTS:
            self._events(rec, start, length)
        elif ctype == ChunkType.LAUNCHES:
            launches = self._array("gpuobs_launch", start, length)
            self.launch_parts.append(launches)
            # Launches belong to the next FLUSH of their device (written right after them).
            self.launch_flush_parts.append(np.full(len(launches), 0xFFFFFFFF, np.uint32))
        elif ctype == ChunkType.CLOCK:
            self.clock_parts.append(self._array("gpuobs_clock_sample", start, length))
        elif ctype == ChunkType.FLUSH:
            self._flush(start, length)
        elif ctype == ChunkType.FUNCTION:
            self._function(rec, start, length)
        elif ctype == ChunkType.DEVICE:
            self.device_parts.append(self._struct("gpuobs_device_info", start, length, exact=True))
        elif ctype == ChunkType.MODULE:
            self.module_parts.append(self._struct("gpuobs_module_info", start, length, exact=True))
        elif ctype == ChunkType.RUN:
            self._run(rec, start, length)
        elif ctype == ChunkType.API_CALLS:
            self.api_parts.append(self._array("gpuobs_api_call", start, length))
        elif ctype == ChunkType.API_NAMES:
            self._api_name(rec, start, length)
        elif ctype == ChunkType.NOTICE:
            self._notice(rec, start, length)
        elif ctype == ChunkType.END:
            rec.end = self._struct("gpuobs_end_info", start, length, exact=True)[0]
        else:
            rec.unknown_chunks += 1  # a newer writer's optional chunk: skip it

    def _array(self, struct_name: str, start: int, length: int) -> np.ndarray:
        dt = schema.dtype(struct_name)
        if length % dt.itemsize:
            raise _PayloadError(f"{length} payload bytes are not a whole number of {dt.itemsize}-byte {struct_name}")
        return np.frombuffer(self.buf, dt, length // dt.itemsize, start)

    def _struct(self, struct_name: str, start: int, length: int, exact: bool = False) -> np.ndarray:
        dt = schema.dtype(struct_name)
        if length < dt.itemsize or (exact and length != dt.itemsize):
            raise _PayloadError(f"{length} payload bytes; {struct_name} needs {dt.itemsize}")
        return np.frombuffer(self.buf, dt, 1, start)

    def _events(self, rec: Recording, start: int, length: int) -> None:
        head = self._struct("gpuobs_events_header", start, length)[0]
        count, padding = int(head["count"]), int(head["padding"])
        first = start + EVENTS_HEADER.itemsize + padding
        need = EVENTS_HEADER.itemsize + padding + count * schema.EVENT_DTYPE.itemsize
        if need != length:
            raise _PayloadError(f"header promises {count} events after {padding} padding bytes ({need} bytes), payload has {length}")
        rec.event_chunks.append(np.frombuffer(self.buf, schema.EVENT_DTYPE, count, first))
        rec.event_chunk_devices.append(int(head["device_index"]))
        rec.event_chunk_flushes.append(int(head["flush_seq"]))

    def _flush(self, start: int, length: int) -> None:
        info = self._struct("gpuobs_flush_info", start, length)
        n = int(info[0]["launch_count_len"])
        count_dt = schema.dtype("gpuobs_launch_count")
        if length != info.itemsize + n * count_dt.itemsize:
            raise _PayloadError(f"declares {n} launch counts but has {length - info.itemsize} bytes for them")
        counts = np.frombuffer(self.buf, count_dt, n, start + info.itemsize)
        rows = np.zeros(n, LAUNCH_COUNT_ROW)
        rows["device_index"] = info[0]["device_index"]
        rows["flush_seq"] = info[0]["flush_seq"]
        rows["grid_id"] = counts["grid_id"]
        rows["count"] = counts["count"]
        rows["launches_sharing"] = counts["launches_sharing"]
        self.flush_parts.append(info)
        self.count_parts.append(rows)
        device, seq = int(info[0]["device_index"]), int(info[0]["flush_seq"])
        for launches, flushes in zip(self.launch_parts, self.launch_flush_parts):
            unassigned = (flushes == 0xFFFFFFFF) & (launches["device_index"] == device)
            flushes[unassigned] = seq

    def _function(self, rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_function_info", start, length)[0]
        mlen, dlen = int(info["mangled_len"]), int(info["demangled_len"])
        base = start + info.dtype.itemsize
        if info.dtype.itemsize + mlen + dlen != length:
            raise _PayloadError(f"names of {mlen}+{dlen} bytes do not fill the {length}-byte payload")
        mangled = bytes(self.buf[base : base + mlen]).decode(errors="replace")
        demangled = bytes(self.buf[base + mlen : base + mlen + dlen]).decode(errors="replace")
        key = (int(info["device_index"]), int(info["function_slot"]))
        rec.functions[key] = FunctionInfo(key[0], key[1], int(info["module_id"]), mangled, demangled)

    def _api_name(self, rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_api_name", start, length)[0]
        n = int(info["name_len"])
        if info.dtype.itemsize + n != length:
            raise _PayloadError(f"a name of {n} bytes does not fill the {length}-byte payload")
        base = start + info.dtype.itemsize
        rec.api_names[int(info["api_id"])] = bytes(self.buf[base : base + n]).decode(errors="replace")

    def _notice(self, rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_notice", start, length)[0]
        n = int(info["text_len"])
        if info.dtype.itemsize + n != length:
            raise _PayloadError(f"a text of {n} bytes does not fill the {length}-byte payload")
        base = start + info.dtype.itemsize
        text = bytes(self.buf[base : base + n]).decode(errors="replace")
        code = int(info["code"])
        name = schema.NoticeCode(code).name.lower() if code in schema.NoticeCode._value2member_map_ else f"code{code}"
        rec.notices.append(Notice(int(info["device_index"]), name, int(info["monotonic_ns"]), text))

    def _run(self, rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_run_info", start, length)[0]
        argv_len = int(info["argv_len"])
        if info.dtype.itemsize + argv_len != length:
            raise _PayloadError(f"argv of {argv_len} bytes does not fill the {length}-byte payload")
        raw = bytes(self.buf[start + info.dtype.itemsize : start + length])
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a] if raw else []
        rec.run = RunInfo(
            pid=int(info["pid"]), mode=int(info["mode"]), sample_shift=int(info["sample_shift"]),
            callback_scope=int(info["callback_scope"]), capacity=int(info["capacity"]),
            start_realtime_ns=int(info["start_realtime_ns"]),
            start_monotonic_ns=int(info["start_monotonic_ns"]), argv=argv,
            window_every=int(info["window_every"]),
        )

    def _finish(self, rec: Recording) -> None:
        def cat(parts, struct_name):
            if not parts:
                return np.zeros(0, schema.dtype(struct_name))
            return parts[0] if len(parts) == 1 else np.concatenate(parts)

        rec.launches = cat(self.launch_parts, "gpuobs_launch")
        rec.launch_flushes = np.concatenate(self.launch_flush_parts) if self.launch_flush_parts else np.zeros(0, np.uint32)
        rec.clock_samples = cat(self.clock_parts, "gpuobs_clock_sample")
        rec.flushes = cat(self.flush_parts, "gpuobs_flush_info")
        rec.devices = cat(self.device_parts, "gpuobs_device_info")
        rec.modules = cat(self.module_parts, "gpuobs_module_info")
        rec.api_calls = cat(self.api_parts, "gpuobs_api_call")
        rec.launch_counts = np.concatenate(self.count_parts) if self.count_parts else np.zeros(0, LAUNCH_COUNT_ROW)


class _PayloadError(Exception):
    pass


def _type_name(ctype: int) -> str:
    try:
        return ChunkType(ctype).name
    except ValueError:
        return f"type-{ctype}"
