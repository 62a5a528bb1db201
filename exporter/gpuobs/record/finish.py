"""What `gpuobs record` reads to summarise a run once the program has exited: every
chunk but the events' payloads (each EVENTS chunk's header says how many it holds),
so the summary of a recording of any size costs its launches, flushes and names,
not a pass over its records. `gpuobs info` reads it all.

`summarise` goes further: the chunks that grow with the run's launches (launch rows,
launch counts, API calls) add only a few numbers each (record/chunk_facts.py), which
a follower worked out while the program ran (record/follower.py). What is left at
the exit is the chunks written since its last look and the small ones, so record
finishes in the same time after a minute's run as after an hour's."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import CorruptChunk, RecordingError
from ..input_files import open_regular
from ..recording_file import mapping_guard, schema
from ..recording_file.fileformat import CHUNK_HEADER, EVENTS_HEADER
from ..recording_file.reader import CHUNK_HEAD, ChunkType, _BadValueAt, _Parser
from ..recording_file.recording import Damage, Recording
from .chunk_facts import GROWING, FactsCache, FactsError, facts_of


class _WithoutEvents(_Parser):
    """load()'s parser, but an EVENTS chunk is counted from its header and skipped
    (neither its CRC nor its values are checked: `gpuobs info` does that)."""

    UNCHECKED = 1 << ChunkType.EVENTS  # the reader's C walk hands them to _chunk below, unread

    def __init__(self, path: Path, buf):
        super().__init__(path, buf, salvage=True)
        self.events = 0

    def _chunk(self, rec: Recording, offset: int) -> int:
        size = len(self.buf)
        if offset + CHUNK_HEADER.itemsize + EVENTS_HEADER.itemsize <= size:
            ctype, flags, length, _crc = CHUNK_HEAD.unpack_from(self.buf, offset)
            start = offset + CHUNK_HEADER.itemsize
            if ctype == ChunkType.EVENTS and flags == 0 and EVENTS_HEADER.itemsize <= length <= size - start:
                head = EVENTS_HEADER.fields["count"]
                self.events += int.from_bytes(self.buf[start + head[1] : start + head[1] + 4], "little")
                return start + length
        return super()._chunk(rec, offset)


class _Summarising(_WithoutEvents):
    """_WithoutEvents, but the growing chunks add their facts (from `cache` where a
    follower found the same chunk at the same offset) and keep no rows: a FLUSH keeps
    its gpuobs_flush_info, for the totals."""

    UNCHECKED = _WithoutEvents.UNCHECKED | sum(1 << t for t in GROWING)  # their CRC: facts_of's
    TABLE_CHUNKS = {t: s for t, s in _Parser.TABLE_CHUNKS.items() if t not in GROWING}  # to _chunk, one by one

    def __init__(self, path: Path, buf, cache: FactsCache | None):
        super().__init__(path, buf)
        self.cache = cache
        self.table_size = schema.LAUNCH_TABLE_SIZE
        self.launches = self.from_device = self.conditional_body = self.counted = self.api_calls = 0
        self.growing = self.from_cache = 0  # growing chunks; of those, whose facts the follower had

    def _header(self) -> Recording:  # (a cached chunk's CRC is not checked again: the tool only appends)
        rec = super()._header()
        self.table_size = schema.launch_table_size(rec.schema_hash)
        return rec

    def _chunk(self, rec: Recording, offset: int) -> int:
        size, start = len(self.buf), offset + CHUNK_HEADER.itemsize
        if start <= size:
            ctype, flags, length, crc = CHUNK_HEAD.unpack_from(self.buf, offset)
            if ctype in GROWING and length <= size - start:  # (else the reader's error for it)
                facts = self.cache.get(offset, (ctype, flags, length, crc)) if self.cache else None
                self.growing += 1
                self.from_cache += facts is not None
                self.packed_chunks += flags != 0
                if facts is None:
                    payload = self.view[start : start + length]
                    try:
                        facts = facts_of(self.buf[offset:start], payload, offset, self.table_size)
                    except FactsError as exc:
                        raise CorruptChunk(self.path, offset, str(exc)) from None
                self.launches += facts.launches
                self.from_device += facts.from_device
                self.conditional_body += facts.conditional_body
                self.counted += facts.counted
                self.api_calls += facts.api_calls
                if ctype == ChunkType.FLUSH:
                    self.offset = offset
                    self._part("flush", facts.flush_info_at, 1)
                return start + length
        return super()._chunk(rec, offset)


def _parsed(path, make_parser):
    """(Recording, parser) of make_parser(path, its mapping), salvaged where damaged (a
    value no tool writes, found once every chunk is read, ends what is kept, as in
    reader.load(salvage=True)). Raises RecordingError where it cannot be read."""
    path = Path(path)
    try:
        with open_regular(path) as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                raise RecordingError(path, 0, "file is empty")
            buf = mapping_guard.map_file(fh, path)
    except OSError as exc:
        raise RecordingError(path, 0, f"cannot open: {exc.strerror or exc}") from None
    end, damage = len(buf), None
    try:
        while True:
            parser = make_parser(path, buf)
            try:
                rec = parser.parse(end)
                break
            except _BadValueAt as bad:
                end = bad.error.offset
                damage = Damage(end, bad.error.reason, len(buf) - end)
    finally:
        mapping_guard.check(path)
    if damage is not None:
        rec.damage = damage
    return rec, parser


def read_without_events(path) -> tuple[Recording, int]:
    """The recording with no events loaded (salvaged where damaged), and how many
    events its EVENTS chunks hold. Raises RecordingError where it cannot be read."""
    rec, parser = _parsed(path, _WithoutEvents)
    return rec, parser.events


def summarise(path, cache: FactsCache | None = None) -> tuple[Recording, dict]:
    """The recording's small tables (no launch rows, counts, API calls or events) and
    record's summary of it (analysis.launches.summary's numbers), the growing chunks'
    facts taken from `cache` where it has them. Raises RecordingError where it cannot
    be read."""
    from ..analysis.launches import summary

    if cache is not None:
        try:
            st = os.stat(path)
        except OSError:
            cache = None
        else:
            cache = cache if cache.identity == (st.st_dev, st.st_ino) else None  # another file by that name
    rec, parser = _parsed(path, lambda p, buf: _Summarising(p, buf, cache))
    s = summary(rec)
    s["launches"], s["device_launches"] = parser.launches, parser.from_device
    s["conditional_body_launches"], s["counted"] = parser.conditional_body, parser.counted
    s["api_calls"], s["growing_chunks"], s["chunks_from_follower"] = parser.api_calls, parser.growing, parser.from_cache
    s["block_events"], s["memory_events"] = events_by_kind(rec, parser.events)
    return rec, s


def events_by_kind(rec: Recording, events: int) -> tuple[int, int]:
    """(block records, memory samples) of `events` records: a mode writes one kind."""
    mode = rec.run.mode_name if rec.run else "unknown"
    if schema.mode_has(mode, schema.Trait.ACCESS_RECORDS):
        return 0, events
    return events, 0
