"""The errors gpuobs reports on bad recordings: each names the file, the byte
offset and what was expected, so a user can tell damage from a version skew."""

from __future__ import annotations


class RecordingError(Exception):
    """A .gpuobs file could not be read as written."""

    def __init__(self, path: str, offset: int, message: str):
        self.path = str(path)
        self.offset = offset
        self.reason = message
        super().__init__(f"{self.path}: at byte {offset}: {message}")


class BadMagic(RecordingError):
    pass


class UnsupportedVersion(RecordingError):
    pass


class SchemaMismatch(RecordingError):
    pass


class CorruptChunk(RecordingError):
    pass


class TruncatedChunk(RecordingError):
    pass
