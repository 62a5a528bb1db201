"""Reads .gpuobs recordings: `load(path)` returns a Recording whose event arrays
are zero-copy views over the file's memory map.

Damage is reported with the file, the byte offset and what was expected;
`salvage=True` keeps every complete chunk before the damage instead. Values
are checked too (recording_checks.py): a chunk whose CRC holds but whose
values no tool writes is damage, named by chunk, row and field."""

from __future__ import annotations

import array
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from ..errors import (
    BadMagic,
    CorruptChunk,
    RecordingError,
    SchemaMismatch,
    TruncatedChunk,
    UnsupportedVersion,
)
from ..input_files import describe, open_regular
from . import chunk_walk, mapping_guard, packed_chunks, schema
from . import recording_checks as checks
from .fileformat import (
    CHUNK_HEADER,
    CRC_COVERED_HEADER_BYTES,
    EVENTS_HEADER,
    FILE_HEADER,
    MAGIC,
    chunk_crc,
)
from .recording import LAUNCH_COUNT_ROW, UNFLUSHED, Damage, FunctionInfo, Recording, RunInfo
from .text_tables import API_NAME_COLUMNS, NOTICE_COLUMNS, ApiNames, Notices, TextColumns, copy_ranges

ChunkType = schema.ChunkType


def load(path, salvage: bool = False) -> Recording:
    """Read a recording. Raises a RecordingError subclass on damage unless salvage=True,
    and InputTruncated when another process cuts the file short while it is read."""
    try:
        rec = _load(path, salvage)
    except RecordingError:
        mapping_guard.check(path)  # zeros read where the file was cut fail its CRCs: say what happened
        raise
    mapping_guard.check(path)
    return rec


def _load(path, salvage: bool) -> Recording:
    path = Path(path)
    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise TruncatedChunk(path, 0, f"file is empty; expected a {FILE_HEADER.itemsize}-byte gpuobs header")
            buf = mapping_guard.map_file(fh, path)
    except OSError as exc:
        raise RecordingError(path, 0, f"cannot open: {describe(exc)}") from None
    end = len(buf)
    while True:
        try:
            rec = _Parser(path, buf, salvage).parse(end)
            break
        except _BadValueAt as bad:
            # Values are checked once every chunk is read: keep what precedes the bad chunk.
            if not salvage:
                raise bad.error from None
            end, damage = bad.error.offset, Damage(bad.error.offset, bad.error.reason, len(buf) - bad.error.offset)
    if end < len(buf):
        rec.damage = damage
    return rec


CHUNK_HEAD = struct.Struct("<IIQI")  # type, flags, length, crc32 (gpuobs_chunk_header without its reserved word)


def _printable(raw: bytes) -> str:
    """Text from the file for a terminal: bytes that are not printable ASCII (a damaged
    header has no checksum) are shown as \\xNN, not as replacement glyphs or controls."""
    text = raw.decode("ascii", errors="backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


RUN_AT_ONCE = 8  # table or text chunks in a row decoded together; fewer, one by one


class _Parser:
    def __init__(self, path: Path, buf: mmap.mmap, salvage: bool):
        self.path = path
        self.buf = buf
        self.view = memoryview(buf)
        self.bytes = np.frombuffer(buf, np.uint8)
        self.salvage = salvage
        # Where each table's rows are in the file, part by part (gathered once at the end:
        # a million one-row chunks keep a few integers each, not an array each).
        self.parts: dict[str, _Parts] = {name: _Parts() for name in _TABLES}
        self.count_keys = array.array("q")  # per launch-count part: device << 32 | flush_seq
        self.event_offsets: list[int] = []
        # Per LAUNCHES part, the flush_seq its launches belong to: the next FLUSH of their
        # device (UNFLUSHED until then). Parts of one device (as the tool writes them)
        # wait in `unflushed` by index; a part of several devices keeps a column of its
        # own in `mixed`. Each launch is assigned once: loading stays linear in flushes.
        self.launch_part_flush = array.array("I")
        self.unflushed: dict[int, array.array] = {}
        self.mixed: dict[int, np.ndarray] = {}  # part index -> flush per launch
        self.unflushed_mixed: dict[int, list] = {}  # device -> [(part index, its rows of that device)]
        self.offset = 0  # of the chunk being decoded
        # What the decoders read: the file, or a packed chunk's payload unpacked (its rows
        # then live in `unpacked`, at unpacked_base onwards of their bytes joined).
        self.data = buf
        self.unpacked: list = []
        self.unpacked_size = 0
        self.unpacked_base = 0
        self.packed_chunks = 0
        # notices and API names as columns and their texts' bytes (text_tables.py), not objects
        self.notice_rows = TextColumns(NOTICE_COLUMNS)
        self.api_name_rows = TextColumns(API_NAME_COLUMNS)

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
            raise BadMagic(
                self.path, 0, f"expected magic {MAGIC!r}, found {bytes(self.buf[:8])!r}: not a gpuobs recording"
            )
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
            tool_version=_printable(bytes(header["tool_version"])),
        )

    # -- chunks ---------------------------------------------------------------
    def parse(self, end: int) -> Recording:
        """The chunks before byte `end`; raises _BadValueAt when a value check fails."""
        rec = self._header()
        offset = FILE_HEADER.itemsize
        size = len(self.buf)
        lib = chunk_walk.library()
        walk = chunk_walk.Walk(lib, self.bytes, self.UNCHECKED) if lib is not None else None
        while offset < end:
            try:
                if walk is not None:  # the frames walked in C, a batch at a time
                    offset = self._walked(rec, walk, offset, end)
                    if offset >= end:
                        break
                offset = self._chunk(rec, offset)  # the one that stopped the walk says why
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
                self.path,
                offset,
                f"chunk header needs {CHUNK_HEADER.itemsize} bytes, only {size - offset} remain (truncated tail)",
            )
        ctype, flags, length, expected = CHUNK_HEAD.unpack_from(self.buf, offset)
        start = offset + CHUNK_HEADER.itemsize
        if length > size - start:
            raise TruncatedChunk(
                self.path,
                offset,
                f"{_type_name(ctype)} chunk declares {length} payload bytes, "
                f"only {size - start} remain (truncated tail)",
            )
        payload = self.view[start : start + length]
        found = chunk_crc(self.view[offset : offset + CRC_COVERED_HEADER_BYTES], payload)
        if found != expected:
            raise CorruptChunk(
                self.path,
                offset,
                f"{_type_name(ctype)} chunk fails its CRC-32 (stored {expected:#010x}, computed {found:#010x})",
            )
        self.offset = offset
        try:
            self._decode_stored(rec, ctype, flags, start, length)
        except (_PayloadError, checks.BadValue, packed_chunks.PackError) as err:
            raise CorruptChunk(self.path, offset, f"{_type_name(ctype)} chunk: {err}") from None
        return start + length

    def _decode_stored(self, rec: Recording, ctype: int, flags: int, start: int, length: int) -> None:
        """_decode of a chunk as stored: a packed one's payload unpacked first."""
        if flags == 0:
            self._decode(rec, ctype, start, length)
            return
        if flags & ~packed_chunks.KNOWN_FLAGS:
            raise _PayloadError(f"flags {flags:#x} hold bits this gpuobs does not know (a newer writer's encoding)")
        if ctype not in packed_chunks.PACKABLE:
            raise _PayloadError(f"packed (flags {flags:#x}), which only LAUNCHES, FLUSH and API_CALLS chunks may be")
        payload = packed_chunks.unpack(self.view[start : start + length], ctype)
        self.unpacked_base = self.unpacked_size
        self.unpacked.append(payload)
        self.unpacked_size += len(payload)
        self.packed_chunks += 1
        self.data = payload
        try:
            self._decode(rec, ctype, 0, len(payload))
        finally:
            self.data = self.buf

    UNCHECKED = 0  # chunk types (bits) whose CRC the walk leaves to _chunk (the windowed reader's EVENTS)
    TABLE_CHUNKS = {ChunkType.LAUNCHES: "gpuobs_launch", ChunkType.CLOCK: "gpuobs_clock_sample"}
    TABLE_CHUNKS[ChunkType.API_CALLS] = "gpuobs_api_call"

    def _walked(self, rec: Recording, walk, offset: int, end: int) -> int:
        """The chunks from `offset` as chunk_walk.c frames and checks them, decoded here:
        runs of table chunks (launches, clock samples, API calls) at once, the rest one
        by one. Returns where the walk stopped: `end`, or a chunk for _chunk to refuse."""
        while offset < end:
            offsets, types, lengths, after, status = walk.walk(offset, end)
            n = len(offsets)
            flags = _gather(self.bytes, np.dtype("<u4"), offsets.astype(np.int64) + 4)  # (the header's flags)
            # runs of one chunk type and flags, found by array: a million chunks of one type are one run
            keys = types.astype(np.uint64) | flags.astype(np.uint64) << np.uint64(32)
            firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if n else np.zeros(0, np.int64)
            ends = np.r_[firsts[1:], n].astype(np.int64)
            for r in range(len(firsts)):  # (no lists of the batch: they would cost memory per chunk)
                i, j, ctype = int(firsts[r]), int(ends[r]), int(types[firsts[r]])
                stored_flags = int(flags[firsts[r]])
                at_once = stored_flags == 0 and (ctype in self.TABLE_CHUNKS or ctype in self.TEXT_CHUNKS)
                if at_once and j - i >= RUN_AT_ONCE:  # a run long enough to pay for its arrays
                    decode_run = self._table_run if ctype in self.TABLE_CHUNKS else self._text_run
                    bad = decode_run(rec, ctype, offsets[i:j], lengths[i:j])
                    if bad is not None:  # its payload does not hold what it says: _chunk says so
                        return int(offsets[i + bad])
                    continue
                for k in range(i, j):  # one chunk at a time, as _chunk decodes it
                    if (self.UNCHECKED >> ctype) & 1:
                        self._chunk(rec, int(offsets[k]))
                        continue
                    self.offset = int(offsets[k])
                    start, length = self.offset + CHUNK_HEADER.itemsize, int(lengths[k])
                    try:
                        self._decode_stored(rec, ctype, stored_flags, start, length)
                    except (_PayloadError, checks.BadValue, packed_chunks.PackError) as err:
                        raise CorruptChunk(self.path, self.offset, f"{_type_name(ctype)} chunk: {err}") from None
            offset = after
            if status != chunk_walk.FULL:
                return offset
        return offset

    def _table_run(self, _rec: Recording, ctype: int, offsets: np.ndarray, lengths: np.ndarray):
        """A run of chunks of one table type, as _decode reads each; the index in the run
        of the first whose payload is no whole number of rows (nothing of it or after
        it taken), else None."""
        dt = schema.dtype(self.TABLE_CHUNKS[ctype])
        whole = lengths % dt.itemsize == 0
        bad = None if whole.all() else int(np.argmin(whole))
        if bad is not None:
            offsets, lengths = offsets[:bad], lengths[:bad]
        rows = (lengths // dt.itemsize).astype(np.int64)
        keep = rows > 0  # an empty chunk keeps nothing
        offsets, rows = offsets[keep].astype(np.int64), rows[keep]
        starts = offsets + CHUNK_HEADER.itemsize
        table = {ChunkType.LAUNCHES: "launch", ChunkType.CLOCK: "clock", ChunkType.API_CALLS: "api"}[ctype]
        self.parts[table].extend(starts, rows, offsets)
        if ctype == ChunkType.LAUNCHES and len(rows):
            self._launch_run(dt, starts, rows)
        return bad

    TEXT_CHUNKS = {
        ChunkType.NOTICE: ("gpuobs_notice", "text_len"),
        ChunkType.API_NAMES: ("gpuobs_api_name", "name_len"),
    }

    def _text_run(self, _rec: Recording, ctype: int, offsets: np.ndarray, lengths: np.ndarray):
        """A run of NOTICE or API_NAMES chunks (a struct, then its text), as _notice and
        _api_name read each: the structs gathered at once, the texts' bytes copied by their
        ranges (decoded where they are read: text_tables.py). The index in the run of the
        first whose payload is not its struct and text, else None."""
        struct_name, length_field = self.TEXT_CHUNKS[ctype]
        dt = schema.dtype(struct_name)
        lengths = lengths.astype(np.int64)
        fits = lengths >= dt.itemsize
        bad = None if fits.all() else int(np.argmin(fits))
        if bad is not None:
            offsets, lengths = offsets[:bad], lengths[:bad]
        starts = offsets.astype(np.int64) + CHUNK_HEADER.itemsize
        info = _gather(self.bytes, dt, starts)
        filled = dt.itemsize + info[length_field].astype(np.int64) == lengths
        if not filled.all():
            first = int(np.argmin(filled))
            bad, starts, lengths, info = first, starts[:first], lengths[:first], info[:first]
        text = copy_ranges(self.bytes, starts + dt.itemsize, lengths - dt.itemsize)
        if ctype == ChunkType.API_NAMES:
            self.api_name_rows.extend(text, lengths - dt.itemsize, api_id=info["api_id"])
            return bad
        self.notice_rows.extend(
            text,
            lengths - dt.itemsize,
            device_index=info["device_index"],
            code=info["code"],
            monotonic_ns=info["monotonic_ns"],
        )
        return bad

    def _launch_run(self, dt: np.dtype, starts: np.ndarray, rows: np.ndarray) -> None:
        """_launches's flush bookkeeping for a run of LAUNCHES parts (starts, rows)."""
        first_part = len(self.launch_part_flush)
        self.launch_part_flush.frombytes(np.full(len(rows), UNFLUSHED, np.uint32).tobytes())
        field = dt.fields["device_index"][1]
        cuts = np.cumsum(rows) - rows
        one_row_each = len(rows) == int(rows.sum())  # a run of one-launch chunks: no per-part reduction
        at = starts
        if not one_row_each:
            at = np.repeat(starts - cuts * dt.itemsize, rows) + np.arange(rows.sum()) * dt.itemsize
        devices = _gather(self.bytes, np.dtype("<u4"), at + field)
        if one_row_each:
            low = high = devices
        else:
            low, high = np.minimum.reduceat(devices, cuts), np.maximum.reduceat(devices, cuts)
        parts = first_part + np.arange(len(rows))
        one = low == high  # the tool writes each device's launches apart
        for device in np.unique(low[one]).tolist():
            self.unflushed.setdefault(device, array.array("q")).frombytes(parts[one & (low == device)].tobytes())
        for k in np.flatnonzero(~one).tolist():  # a part of several devices: as _launches does
            part_devices = devices[cuts[k] : cuts[k] + rows[k]]
            self.mixed[int(parts[k])] = np.full(int(rows[k]), UNFLUSHED, np.uint32)
            order = np.argsort(part_devices, kind="stable")
            split = np.flatnonzero(np.diff(part_devices[order])) + 1
            for r in np.split(order, split):
                self.unflushed_mixed.setdefault(int(part_devices[r[0]]), []).append((int(parts[k]), r))

    def _decode(self, rec: Recording, ctype: int, start: int, length: int) -> None:
        if ctype == ChunkType.EVENTS:
            self._events(rec, start, length)
        elif ctype == ChunkType.LAUNCHES:
            self._launches(start, length)
        elif ctype == ChunkType.CLOCK:
            self._part("clock", start, len(self._array("gpuobs_clock_sample", start, length)))
        elif ctype == ChunkType.FLUSH:
            self._flush(start, length)
        elif ctype == ChunkType.FUNCTION:
            self._function(rec, start, length)
        elif ctype == ChunkType.DEVICE:
            info = self._struct("gpuobs_device_info", start, length, exact=True)
            checks.check_device(info[0])
            self._part("device", start, 1)
        elif ctype == ChunkType.MODULE:
            info = self._struct("gpuobs_module_info", start, length, exact=True)
            checks.check_module(info[0])
            self._part("module", start, 1)
        elif ctype == ChunkType.RUN:
            self._run(rec, start, length)
        elif ctype == ChunkType.API_CALLS:
            self._part("api", start, len(self._array("gpuobs_api_call", start, length)))
        elif ctype == ChunkType.API_NAMES:
            self._api_name(rec, start, length)
        elif ctype == ChunkType.NOTICE:
            self._notice(rec, start, length)
        elif ctype == ChunkType.SLOTS:
            info = self._struct("gpuobs_slots_info", start, length, exact=True)
            checks.check_slots(info[0])
            self._part("slots", start, 1)
        elif ctype == ChunkType.SAMPLING:
            info = self._struct("gpuobs_sampling_info", start, length, exact=True)
            checks.check_sampling(info[0])
            self._part("sampling", start, 1)
        elif ctype == ChunkType.END:
            rec.end = self._struct("gpuobs_end_info", start, length, exact=True)[0]
        else:
            rec.unknown_chunks += 1  # a newer writer's optional chunk: skip it

    def _part(self, table: str, start: int, rows: int) -> None:
        """`rows` rows of a table from byte `start` (of the data decoded): where they are
        is kept, not a view."""
        if rows == 0:  # an empty chunk keeps nothing: a million of them cost no memory
            return
        if self.data is self.buf:
            self.parts[table].add(start, rows, self.offset)
        else:
            self.parts[table].add(self.unpacked_base + start, rows, self.offset, unpacked=True)

    def _array(self, struct_name: str, start: int, length: int) -> np.ndarray:
        dt = schema.dtype(struct_name)
        if length % dt.itemsize:
            raise _PayloadError(f"{length} payload bytes are not a whole number of {dt.itemsize}-byte {struct_name}")
        return np.frombuffer(self.data, dt, length // dt.itemsize, start)

    def _struct(self, struct_name: str, start: int, length: int, exact: bool = False) -> np.ndarray:
        dt = schema.dtype(struct_name)
        if length < dt.itemsize or (exact and length != dt.itemsize):
            raise _PayloadError(f"{length} payload bytes; {struct_name} needs {dt.itemsize}")
        return np.frombuffer(self.data, dt, 1, start)

    def _events(self, rec: Recording, start: int, length: int) -> None:
        head = self._struct("gpuobs_events_header", start, length)[0]
        count, padding = int(head["count"]), int(head["padding"])
        first = start + EVENTS_HEADER.itemsize + padding
        need = EVENTS_HEADER.itemsize + padding + count * schema.EVENT_DTYPE.itemsize
        if need != length:
            raise _PayloadError(
                f"header promises {count} events after {padding} padding bytes ({need} bytes), payload has {length}"
            )
        checks.check_events_header(int(head["device_index"]), int(head["flush_seq"]))
        rec.event_chunks.append(np.frombuffer(self.buf, schema.EVENT_DTYPE, count, first))
        rec.event_chunk_devices.append(int(head["device_index"]))
        rec.event_chunk_flushes.append(int(head["flush_seq"]))
        self.event_offsets.append(self.offset)

    def _flush(self, start: int, length: int) -> None:
        info = self._struct("gpuobs_flush_info", start, length)
        n = int(info[0]["launch_count_len"])
        count_dt = schema.dtype("gpuobs_launch_count")
        if length != info.itemsize + n * count_dt.itemsize:
            raise _PayloadError(f"declares {n} launch counts but has {length - info.itemsize} bytes for them")
        counts = np.frombuffer(self.data, count_dt, n, start + info.itemsize)
        checks.check_flush(info[0], counts)
        device, seq = int(info[0]["device_index"]), int(info[0]["flush_seq"])
        self._part("flush", start, 1)
        if n:
            self._part("count", start + info.itemsize, n)
            self.count_keys.append(device << 32 | seq)
        waiting = self.unflushed.pop(device, None)
        if waiting:  # by array: a million one-launch parts may wait for this flush
            np.frombuffer(self.launch_part_flush, np.uint32)[np.frombuffer(waiting, np.int64)] = seq
        for part, rows in self.unflushed_mixed.pop(device, ()):
            self.mixed[part][rows] = seq

    def _launches(self, start: int, length: int) -> None:
        launches = self._array("gpuobs_launch", start, length)
        if len(launches) == 0:
            return
        # Launches belong to the next FLUSH of their device (written right after them).
        part = len(self.launch_part_flush)
        self._part("launch", start, len(launches))
        self.launch_part_flush.append(UNFLUSHED)
        devices = launches["device_index"]
        if (devices == devices[0]).all():  # the tool writes each device's launches apart
            self.unflushed.setdefault(int(devices[0]), array.array("q")).append(part)
            return
        self.mixed[part] = np.full(len(launches), UNFLUSHED, np.uint32)
        order = np.argsort(devices, kind="stable")
        cuts = np.flatnonzero(np.diff(devices[order])) + 1
        for rows in np.split(order, cuts):
            self.unflushed_mixed.setdefault(int(devices[rows[0]]), []).append((part, rows))

    def _function(self, rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_function_info", start, length)[0]
        mlen, dlen = int(info["mangled_len"]), int(info["demangled_len"])
        base = start + info.dtype.itemsize
        if info.dtype.itemsize + mlen + dlen != length:
            raise _PayloadError(f"names of {mlen}+{dlen} bytes do not fill the {length}-byte payload")
        checks.check_function(info)
        mangled = bytes(self.buf[base : base + mlen]).decode(errors="replace")
        demangled = bytes(self.buf[base + mlen : base + mlen + dlen]).decode(errors="replace")
        key = (int(info["device_index"]), int(info["function_slot"]))
        rec.functions[key] = FunctionInfo(key[0], key[1], int(info["module_id"]), mangled, demangled)

    def _api_name(self, _rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_api_name", start, length)[0]
        n = int(info["name_len"])
        if info.dtype.itemsize + n != length:
            raise _PayloadError(f"a name of {n} bytes does not fill the {length}-byte payload")
        base = start + info.dtype.itemsize
        self.api_name_rows.add(bytes(self.buf[base : base + n]), api_id=int(info["api_id"]))

    def _notice(self, _rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_notice", start, length)[0]
        n = int(info["text_len"])
        if info.dtype.itemsize + n != length:
            raise _PayloadError(f"a text of {n} bytes does not fill the {length}-byte payload")
        base = start + info.dtype.itemsize
        self.notice_rows.add(
            bytes(self.buf[base : base + n]),
            device_index=int(info["device_index"]),
            code=int(info["code"]),
            monotonic_ns=int(info["monotonic_ns"]),
        )

    def _run(self, rec: Recording, start: int, length: int) -> None:
        info = self._struct("gpuobs_run_info", start, length)[0]
        argv_len = int(info["argv_len"])
        if info.dtype.itemsize + argv_len != length:
            raise _PayloadError(f"argv of {argv_len} bytes does not fill the {length}-byte payload")
        raw = bytes(self.buf[start + info.dtype.itemsize : start + length])
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a] if raw else []
        rec.run = RunInfo(
            pid=int(info["pid"]),
            mode=int(info["mode"]),
            sample_shift=int(info["sample_shift"]),
            callback_scope=int(info["callback_scope"]),
            capacity=int(info["capacity"]),
            start_realtime_ns=int(info["start_realtime_ns"]),
            start_monotonic_ns=int(info["start_monotonic_ns"]),
            argv=argv,
            window_every=int(info["window_every"]),
        )

    # -- tables ----------------------------------------------------------------
    def _finish(self, rec: Recording) -> None:
        rec.notices, rec.api_names = Notices(self.notice_rows), ApiNames(self.api_name_rows)
        rec.packed_chunks = self.packed_chunks
        unpacked = np.concatenate(self.unpacked) if self.unpacked else None
        self.unpacked = []
        for table, (attr, struct_name, check) in _TABLES.items():
            parts = self.parts[table]
            whole = parts.gather(self.bytes, schema.dtype(struct_name or "gpuobs_launch_count"), unpacked)
            if table == "count":
                whole = self._count_rows(whole)
            setattr(rec, attr, whole)
            if check is not None:
                self._check(table, parts, whole, check)
        parts = self.parts["launch"]
        flushes = np.frombuffer(self.launch_part_flush, np.uint32) if len(self.launch_part_flush) else None
        rec.launch_flushes = (
            np.zeros(0, np.uint32) if flushes is None else np.repeat(flushes, np.frombuffer(parts.rows, np.int64))
        )
        if self.mixed:
            first = np.concatenate([[0], np.cumsum(np.frombuffer(parts.rows, np.int64))])
            for part, flushes in self.mixed.items():
                rec.launch_flushes[first[part] : first[part + 1]] = flushes
        self._check_events(rec)

    def _count_rows(self, counts: np.ndarray) -> np.ndarray:
        """LAUNCH_COUNT_ROW of the gathered gpuobs_launch_count rows, each with its FLUSH's device and seq."""
        rows = np.zeros(len(counts), LAUNCH_COUNT_ROW)
        if len(counts):
            keys = np.repeat(
                np.frombuffer(self.count_keys, np.int64), np.frombuffer(self.parts["count"].rows, np.int64)
            )
            rows["device_index"] = keys >> 32
            rows["flush_seq"] = keys & 0xFFFFFFFF
            rows["grid_id"] = counts["grid_id"]
            rows["count"] = counts["count"]
            rows["launches_sharing"] = counts["launches_sharing"]
        return rows

    def _check(self, table: str, parts: "_Parts", whole: np.ndarray, check) -> None:
        try:
            check(whole)
        except checks.BadValue as bad:
            ends = np.cumsum(np.frombuffer(parts.rows, np.int64))
            i = int(np.searchsorted(ends, bad.row, side="right"))
            row = bad.row - (int(ends[i - 1]) if i else 0)
            raise self._bad_value(parts.chunks[i], f"{bad.what} {row}: {bad}") from None

    def _check_events(self, rec: Recording) -> None:
        limits = checks.sm_limits(rec.devices)
        for chunk, device, offset in zip(rec.event_chunks, rec.event_chunk_devices, self.event_offsets):
            try:
                checks.check_events(chunk, limits.get(device, checks.SM_ID_LIMIT))
            except checks.BadValue as bad:
                raise self._bad_value(offset, f"{bad.what} {bad.row}: {bad}") from None
        depth, chunk, row = checks.deepest_block_overlap(rec.event_chunks, rec.event_chunk_devices)
        if depth > checks.MAX_BLOCK_OVERLAP:
            sm = int(rec.event_chunks[chunk][row]["sm_id"])
            raise self._bad_value(
                self.event_offsets[chunk],
                f"event {row}: {depth:,} blocks are open at once on SM {sm} of device "
                f"{rec.event_chunk_devices[chunk]} (at most {checks.MAX_BLOCK_OVERLAP:,}; an SM "
                "keeps at most 32 blocks resident)",
            )

    def _bad_value(self, offset: int, message: str) -> "_BadValueAt":
        ctype = CHUNK_HEAD.unpack_from(self.buf, offset)[0]
        return _BadValueAt(CorruptChunk(self.path, offset, f"{_type_name(ctype)} chunk: {message}"))


# table -> (Recording attribute, struct (None: LAUNCH_COUNT_ROW), value check of the whole table)
_TABLES = {
    "launch": ("launches", "gpuobs_launch", checks.check_launches),
    "clock": ("clock_samples", "gpuobs_clock_sample", checks.check_clock_samples),
    "flush": ("flushes", "gpuobs_flush_info", None),
    "slots": ("slots", "gpuobs_slots_info", None),
    "sampling": ("sampling", "gpuobs_sampling_info", None),
    "count": ("launch_counts", None, None),
    "device": ("devices", "gpuobs_device_info", None),
    "module": ("modules", "gpuobs_module_info", None),
    "api": ("api_calls", "gpuobs_api_call", checks.check_api_calls),
}


def _gather(data: np.ndarray, dtype: np.dtype, starts: np.ndarray) -> np.ndarray:
    """One row of `dtype` from each byte offset of `starts` in `data`, copied."""
    if len(starts) == 0:
        return np.zeros(0, dtype)
    size = dtype.itemsize
    # every byte offset as the start of a row of `size` bytes: fancy indexing copies just the rows
    by_offset = np.lib.stride_tricks.as_strided(data, (len(data) - size + 1, size), (1, 1), writeable=False)
    return np.ascontiguousarray(by_offset[starts]).view(dtype).ravel()


class _Parts:
    """Where a table's rows are: per part (chunk), its first byte, rows and chunk
    offset, as plain integers (24 bytes a part); the first byte is of the file, or of
    the packed chunks' payloads unpacked and joined for the parts listed `unpacked`."""

    def __init__(self):
        self.starts, self.rows, self.chunks = array.array("q"), array.array("q"), array.array("q")
        self.unpacked = array.array("q")  # indexes of the parts whose rows were unpacked

    def add(self, start: int, rows: int, chunk: int, unpacked: bool = False) -> None:
        if unpacked:
            self.unpacked.append(len(self.starts))
        self.starts.append(start)
        self.rows.append(rows)
        self.chunks.append(chunk)

    def extend(self, starts: np.ndarray, rows: np.ndarray, chunks: np.ndarray) -> None:
        for column, values in ((self.starts, starts), (self.rows, rows), (self.chunks, chunks)):
            column.frombytes(np.ascontiguousarray(values, np.int64).tobytes())

    def gather(self, data: np.ndarray, dtype: np.dtype, unpacked: np.ndarray | None = None) -> np.ndarray:
        """The table: a view for one part, else one copy of every part's rows, in part
        order (rows from the file and from `unpacked`, the unpacked payloads joined)."""
        if len(self.starts) == 0:
            return np.zeros(0, dtype)
        starts, rows = np.frombuffer(self.starts, np.int64), np.frombuffer(self.rows, np.int64)
        if not len(self.unpacked):
            return _rows(data, dtype, starts, rows)
        from_unpacked = np.zeros(len(starts), bool)
        from_unpacked[np.frombuffer(self.unpacked, np.int64)] = True
        if from_unpacked.all():
            return _rows(unpacked, dtype, starts, rows)
        out = np.empty(int(rows.sum()), dtype)
        row_unpacked = np.repeat(from_unpacked, rows)
        out[~row_unpacked] = _rows(data, dtype, starts[~from_unpacked], rows[~from_unpacked])
        out[row_unpacked] = _rows(unpacked, dtype, starts[from_unpacked], rows[from_unpacked])
        return out


def _rows(data: np.ndarray, dtype: np.dtype, starts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows of parts (first byte, rows) of `data`: a view of one part, else one copy."""
    if len(starts) == 1:
        return np.frombuffer(data, dtype, int(rows[0]), int(starts[0]))
    size = dtype.itemsize
    first_row = np.cumsum(rows) - rows  # of each part in the table
    return _gather(data, dtype, np.repeat(starts - first_row * size, rows) + np.arange(int(rows.sum())) * size)


class _PayloadError(Exception):
    pass


class _BadValueAt(Exception):
    """A value check failed after every chunk was read; `error` names the chunk."""

    def __init__(self, error: CorruptChunk):
        super().__init__(str(error))
        self.error = error


def _type_name(ctype: int) -> str:
    try:
        return ChunkType(ctype).name
    except ValueError:
        return f"type-{ctype}"
