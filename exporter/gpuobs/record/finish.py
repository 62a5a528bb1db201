"""What `gpuobs record` reads to summarise a run once the program has exited: every
chunk but the events' payloads (each EVENTS chunk's header says how many it holds),
so the summary of a recording of any size costs its few megabytes of launches,
flushes and names, not a pass over its records. `gpuobs info` reads it all."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import RecordingError
from ..input_files import open_regular
from ..recording_file import mapping_guard, schema
from ..recording_file.fileformat import CHUNK_HEADER, EVENTS_HEADER
from ..recording_file.reader import CHUNK_HEAD, ChunkType, _BadValueAt, _Parser
from ..recording_file.recording import Recording


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


def read_without_events(path) -> tuple[Recording, int]:
    """The recording with no events loaded (salvaged where damaged), and how many
    events its EVENTS chunks hold. Raises RecordingError where it cannot be read."""
    path = Path(path)
    try:
        with open_regular(path) as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                raise RecordingError(path, 0, "file is empty")
            buf = mapping_guard.map_file(fh, path)
    except OSError as exc:
        raise RecordingError(path, 0, f"cannot open: {exc.strerror or exc}") from None
    parser = _WithoutEvents(path, buf)
    try:
        rec = parser.parse(len(buf))
    except _BadValueAt as bad:
        raise bad.error from None
    finally:
        mapping_guard.check(path)
    return rec, parser.events


def events_by_kind(rec: Recording, events: int) -> tuple[int, int]:
    """(block records, memory samples) of `events` records: a mode writes one kind."""
    mode = rec.run.mode_name if rec.run else "unknown"
    if schema.mode_has(mode, schema.Trait.ACCESS_RECORDS):
        return 0, events
    return events, 0
