"""The errors gpuobs raises. Every one derives from GpuobsError, so a caller of the
package catches one class, and the CLI says each in one `gpuobs:` line (exit 2).

RecordingError and its subclasses name the file, the byte offset and what was
expected, so a user can tell damage from a version skew."""

from __future__ import annotations

MAX_LINE = 1000  # characters in one error line: a 4,000-digit number from a file is not read whole


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """`text` as one line of at most `limit` characters: line breaks written as `\\n`,
    and a longer middle cut out and marked, so the start (what and where) and the end stay."""
    text = str(text).replace("\r", "\\r").replace("\n", "\\n")
    if len(text) <= limit:
        return text
    marker = " [... {:,} characters cut ...] "
    room = limit - len(marker.format(len(text)))
    head, tail = room * 2 // 3, room - room * 2 // 3
    return text[:head] + marker.format(len(text) - head - tail) + text[len(text) - tail :]


class GpuobsError(Exception):
    """Something gpuobs was asked to do cannot be done as asked; the message says what and where."""


class RecordingError(GpuobsError):
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


class SelectionError(GpuobsError):
    """--kernels, --launches, --time-window/--time or --flushes cannot select as given (selection.py)."""


class ExportError(GpuobsError):
    """A trace or a Parquet directory cannot be written as asked."""


class TrimError(SelectionError):
    """`gpuobs trim`'s selection keeps nothing, or cannot be made."""


class DiffError(GpuobsError):
    """`gpuobs diff` cannot compare the recordings as given."""
