"""A recording read window by window: `open_windows(path)` reads every chunk but the
events as `load()` does (the same parser, checks and errors) and, for the events,
an index of their chunks (device, flush window, byte offsets, and per chunk its time
range, function slots and, per zone of ZONE_ROWS events, its start times' and grid
ids' ranges) built in one pass that reads each chunk a segment at a time with pread
(the figures by event_index.c where it builds): the events are not mapped, so they
never count in the process's memory, and a writer reads the segments it needs
(`segments`) when it needs them; a time window, only the zones it needs.

What is checked is what load() checks: every chunk's CRC-32 and its events' values
(kinds, slots, SM ids, times). The blocks-open-at-once check runs where the events
are read (overlap_bound.py: on every block for info, stats, trim and Parquet; on the
blocks the streamed Perfetto export writes, per whole SM)."""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CorruptChunk, RecordingError
from ..input_files import describe, open_regular
from . import event_index, mapping_guard, schema
from . import recording_checks as checks
from .fileformat import CHUNK_HEADER, CRC_COVERED_HEADER_BYTES, EVENTS_HEADER, chunk_crc
from .reader import CHUNK_HEAD, ChunkType, _BadValueAt, _Parser, _PayloadError, _type_name
from .recording import Recording

SEGMENT_ROWS = 1 << 18  # events read at once (16 MB)
ZONE_ROWS = 1 << 12  # events per zone of the index (256 KB): their start times' and grid ids' ranges
CRC_BYTES = 16 << 20  # bytes read at once for a chunk's CRC


@dataclass
class EventChunk:
    """One EVENTS chunk: where its events are and what the index pass saw in them."""

    offset: int  # of the chunk header (errors name it)
    first: int  # byte offset of its first event
    count: int
    device: int
    flush: int
    min_start: int = 0  # time_start's minimum (0 without events)
    max_start: int = 0
    max_end: int = 0  # of max(time_end, time_start)
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the function slots it names
    kinds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # events per kind
    # per zone of ZONE_ROWS events: the least and greatest time_start and grid_id (4 rows)
    zones: np.ndarray = field(default_factory=lambda: np.zeros((4, 0), np.uint64))


@dataclass
class WindowedRecording:
    """The recording without its events (`rec`, whose event lists are empty) and the
    index of its event chunks, read with `segments`. Close it, or use it in `with`."""

    rec: Recording
    chunks: list
    fd: int

    @property
    def path(self) -> str:
        return self.rec.path

    damage = None  # read whole or not at all (no salvage)

    @property
    def event_count(self) -> int:
        return sum(c.count for c in self.chunks)

    def read(self, chunk: EventChunk, lo: int, hi: int) -> np.ndarray:
        """Events lo..hi of a chunk, read into a new array."""
        size = schema.EVENT_DTYPE.itemsize
        out = np.empty(hi - lo, schema.EVENT_DTYPE)
        view = memoryview(out.view(np.uint8))
        done, want = 0, (hi - lo) * size
        while done < want:
            n = os.preadv(self.fd, [view[done:]], chunk.first + lo * size + done)
            if n <= 0:
                raise RecordingError(Path(self.path), chunk.offset, "the file shrank while it was read")
            done += n
        return out

    def segments(self, chunk: EventChunk, rows: int = 0, ranges=None):
        """(first row, events) of a chunk, at most `rows` (SEGMENT_ROWS) at a time; of
        these (first, end) row ranges only, where given."""
        rows = rows or SEGMENT_ROWS
        for first, end in [(0, chunk.count)] if ranges is None else ranges:
            for lo in range(first, end, rows):
                yield lo, self.read(chunk, lo, min(lo + rows, end))

    def lazy_chunks(self) -> list:
        """Every EVENTS chunk as a LazyChunk, for code that slices chunks' arrays."""
        return [LazyChunk(self, c) for c in self.chunks]

    def span(self):
        """(first start, last end) device ns over every event; None without events."""
        timed = [c for c in self.chunks if c.count]
        if not timed:
            return None
        return min(c.min_start for c in timed), max(c.max_end for c in timed)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class LazyChunk:
    """An EVENTS chunk read when sliced: len() and slices, as code that reads a chunk's
    array a slice at a time (recording_checks.deepest_block_overlap) reads it."""

    def __init__(self, wr: WindowedRecording, chunk: EventChunk):
        self.wr, self.chunk = wr, chunk

    def __len__(self) -> int:
        return self.chunk.count

    def __getitem__(self, rows: slice) -> np.ndarray:
        lo, hi, _ = rows.indices(self.chunk.count)
        return self.wr.read(self.chunk, lo, max(lo, hi))


def open_windows(path) -> WindowedRecording:
    """Read a recording's chunks but its events, and index those (see the module's note).
    Raises the RecordingError load() raises for the same damage (no salvage)."""
    from .reader import load  # noqa: F401  (the same module's errors and messages)

    path = Path(path)
    try:
        with open_regular(path) as fh:
            fd = os.dup(fh.fileno())
    except OSError as exc:
        raise RecordingError(path, 0, f"cannot open: {describe(exc)}") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            from ..errors import TruncatedChunk
            from .fileformat import FILE_HEADER

            raise TruncatedChunk(path, 0, f"file is empty; expected a {FILE_HEADER.itemsize}-byte gpuobs header")
        buf = mapping_guard.map_file(fd, path)  # a cut under the map: one error, not SIGBUS
        parser = _WindowParser(path, buf, fd)
        try:
            rec = parser.parse(len(buf))
            _check_values(parser, rec)
        except _BadValueAt as bad:  # load() raises the chunk's error itself (no salvage here)
            mapping_guard.check(path)  # say that the file was cut short, not what the zeros broke
            raise bad.error from None
        except RecordingError:
            mapping_guard.check(path)
            raise
        mapping_guard.check(path)
        return WindowedRecording(rec, parser.chunks, fd)
    except BaseException:
        os.close(fd)
        raise


class _WindowParser(_Parser):
    """load()'s parser, but an EVENTS chunk is indexed (read by pread), not mapped."""

    UNCHECKED = 1 << ChunkType.EVENTS  # the C walk leaves their CRC to _chunk below (by pread)

    def __init__(self, path: Path, buf, fd: int):
        super().__init__(path, buf, salvage=False)
        self.fd = fd
        self.chunks: list = []

    def _chunk(self, rec: Recording, offset: int) -> int:
        size = len(self.buf)
        if offset + CHUNK_HEADER.itemsize > size:
            return super()._chunk(rec, offset)  # its truncation error
        ctype, flags, length, expected = CHUNK_HEAD.unpack_from(self.buf, offset)
        start = offset + CHUNK_HEADER.itemsize
        if ctype != ChunkType.EVENTS or flags or length > size - start or length < EVENTS_HEADER.itemsize:
            return super()._chunk(rec, offset)
        self.offset = offset
        try:
            chunk = self._index(start, length)
        except (_PayloadError, checks.BadValue) as err:
            raise CorruptChunk(self.path, offset, f"{_type_name(ctype)} chunk: {err}") from None
        found = self._stream_crc(offset, start, length, chunk)
        if found != expected:
            raise CorruptChunk(
                self.path,
                offset,
                f"{_type_name(ctype)} chunk fails its CRC-32 (stored {expected:#010x}, computed {found:#010x})",
            )
        self.chunks.append(chunk)
        return start + length

    def _index(self, start: int, length: int) -> EventChunk:
        head = np.frombuffer(bytes(self.buf[start : start + EVENTS_HEADER.itemsize]), EVENTS_HEADER, 1)[0]
        count, padding = int(head["count"]), int(head["padding"])
        need = EVENTS_HEADER.itemsize + padding + count * schema.EVENT_DTYPE.itemsize
        if need != length:
            raise _PayloadError(
                f"header promises {count} events after {padding} padding bytes ({need} bytes), payload has {length}"
            )
        checks.check_events_header(int(head["device_index"]), int(head["flush_seq"]))
        return EventChunk(
            self.offset,
            start + EVENTS_HEADER.itemsize + padding,
            count,
            int(head["device_index"]),
            int(head["flush_seq"]),
        )

    def _stream_crc(self, offset: int, start: int, length: int, chunk: EventChunk) -> int:
        """The chunk's CRC-32, read CRC_BYTES at a time into one buffer; the events'
        index figures on the way (whole events each read: the events are 64-byte aligned)."""
        crc = zlib.crc32(
            self.buf[start : chunk.first], chunk_crc(self.buf[offset : offset + CRC_COVERED_HEADER_BYTES], b"")
        )
        size = schema.EVENT_DTYPE.itemsize
        block = np.empty(min(CRC_BYTES, max(chunk.count, 1) * size) // size * size, np.uint8)
        view = memoryview(block)
        stats = _Stats(chunk.count)
        pos, end, row = chunk.first, start + length, 0
        while pos < end:
            want = min(len(block), end - pos)
            got = os.preadv(self.fd, [view[:want]], pos)
            if got != want:
                raise RecordingError(self.path, offset, "the file shrank while it was read")
            crc = zlib.crc32(view[:got], crc)
            ev = block[:got].view(schema.EVENT_DTYPE)
            stats.add(ev, row)
            row += len(ev)
            pos += got
        stats.into(chunk)
        return crc & 0xFFFFFFFF


class _Stats:
    """What the index keeps of a chunk's events, gathered a block at a time: in one
    pass of event_index.c where it is built, else with numpy (the same figures)."""

    def __init__(self, count: int):
        # least start, greatest start, greatest max(end, start), greatest time, slot, SM id
        self.figures = np.array([np.iinfo(np.uint64).max, 0, 0, 0, 0, 0], np.uint64)
        self.slots = np.zeros(checks.FUNCTION_SLOTS + 1, np.uint8)
        self.kinds = np.zeros(256, np.int64)
        zones = -(-count // ZONE_ROWS)
        self.zones = np.zeros((4, zones), np.uint64)
        self.zones[[0, 2]] = np.iinfo(np.uint64).max  # least start, least grid id
        self.lib = event_index.library()

    def add(self, ev: np.ndarray, row: int) -> None:
        """Events `ev`, rows row.. of the chunk."""
        if len(ev) == 0:
            return
        if self.lib is not None:
            event_index.index_events(self.lib, ev, row, ZONE_ROWS, self.figures, self.kinds, self.slots, self.zones)
            return
        start, end = ev["time_start"], ev["time_end"]
        last = np.maximum(end, start)
        f = self.figures
        slots = ev["function_slot"]
        sm = max(int(ev["sm_id"].max()), int(ev["sm_id_end"].max()))
        for i, value, pick in (
            (0, int(start.min()), min),
            (1, int(start.max()), max),
            (2, int(last.max()), max),
            (3, int(last.max()), max),
            (4, int(slots.max()), max),
            (5, sm, max),
        ):
            f[i] = pick(int(f[i]), value)
        self.slots |= np.bincount(slots[slots < len(self.slots)], minlength=len(self.slots)).astype(bool)
        self.kinds += np.bincount(ev["kind"], minlength=256)[:256]
        # per zone: a run of whole zones and the parts of the zones at either end
        cuts = np.arange((row // ZONE_ROWS) * ZONE_ROWS, row + len(ev), ZONE_ROWS, dtype=np.int64) - row
        cuts[0] = 0
        at = row // ZONE_ROWS + np.arange(len(cuts))
        z = self.zones
        z[0, at] = np.minimum(z[0, at], np.minimum.reduceat(start, cuts))
        z[1, at] = np.maximum(z[1, at], np.maximum.reduceat(start, cuts))
        z[2, at] = np.minimum(z[2, at], np.minimum.reduceat(ev["grid_id"], cuts))
        z[3, at] = np.maximum(z[3, at], np.maximum.reduceat(ev["grid_id"], cuts))

    def into(self, chunk: EventChunk) -> None:
        empty = chunk.count == 0
        f = [int(v) for v in self.figures]
        chunk.min_start = 0 if empty else f[0]
        chunk.max_start = 0 if empty else f[1]
        chunk.max_end = 0 if empty else f[2]
        seen = self.slots[: min(f[4], len(self.slots) - 1) + 1]  # up to the greatest slot named
        chunk.slots = np.flatnonzero(seen)  # not a flag per possible slot: 64 KB a chunk
        chunk.kinds = self.kinds
        chunk.zones = self.zones
        chunk._limits = (f[5], f[4], f[3], int(np.flatnonzero(self.kinds).max(initial=0)))


def _check_values(parser: _WindowParser, rec: Recording) -> None:
    """load()'s value checks of the events: where a chunk's maxima pass no check can
    fail; where one may, the chunk is read and checked as load() checks it (the same
    message, naming its first bad row)."""
    limits = checks.sm_limits(rec.devices)
    for chunk in parser.chunks:
        max_sm, max_slot, max_time, max_kind = chunk._limits
        sm_limit = limits.get(chunk.device, checks.SM_ID_LIMIT)
        if (
            max_sm < sm_limit
            and max_slot < checks.FUNCTION_SLOTS
            and max_time < checks.TIME_LIMIT_NS
            and max_kind <= max(checks.EVENT_KINDS)
        ):
            continue
        with_fd = WindowedRecording(rec, [], parser.fd)
        for lo, part in with_fd.segments(chunk):
            try:
                checks.check_events(part, sm_limit)
            except checks.BadValue as bad:
                raise parser._bad_value(chunk.offset, f"{bad.what} {bad.row + lo}: {bad}").error from None
