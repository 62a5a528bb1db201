"""Reads a JSON document whose top level is an object, one member at a time, and
one array member one element at a time, holding only a window of the text. A
trace of hundreds of megabytes never becomes one Python object tree: each
element is decoded, handed over and dropped. A single member value or element
larger than MAX_VALUE_CHARS is refused (a trace event is a few hundred)."""

from __future__ import annotations

import codecs
import json
import re
from typing import Callable

from ..errors import GpuobsError

READ_BYTES = 1 << 20
MAX_VALUE_CHARS = 4 << 20
_WS = re.compile(r"[ \t\n\r]*")
_TAIL = 16  # a decode error this close to the end of the window may only be a value cut off by it


class JsonStreamError(GpuobsError, ValueError):
    pass


class _Window:
    """The undecoded rest of a binary file as text, kept from `pos` on."""

    def __init__(self, fh):
        self.fh = fh
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
        self.text = ""
        self.pos = 0
        self.eof = False
        self.bytes_read = 0
        self.chars_before = 0  # characters dropped from the front of `text`
        self.lines_before = 0  # newlines among them
        self.line_start = 0  # character index (from the file's start) after the last dropped newline

    def read_bytes(self) -> tuple[bytes, str]:
        """Another piece of the file, as read and as text (checked to be UTF-8)."""
        data = self.fh.read(READ_BYTES)
        try:
            piece = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise JsonStreamError(
                f"not UTF-8 text: byte {self.bytes_read + exc.start:,} is "
                f"{exc.object[exc.start : exc.start + 1]!r} ({exc.reason})"
            ) from None
        self.bytes_read += len(data)
        self.eof = not data
        return data, piece

    def hand_over(self) -> bytes:
        """The rest of the file read so far, from `pos`, as UTF-8 bytes (the text, then
        what the decoder holds of a character cut off), for a reader of bytes; its
        position is kept here, with `text` emptied."""
        rest = self.text[self.pos :].encode() + self.decoder.getstate()[0]
        self.passed(self.text[: self.pos])
        self.text, self.pos = "", 0
        return rest

    def passed(self, text: str) -> None:
        """Counts `text`, read past in one piece from the position, into the position."""
        newlines = text.count("\n")
        if newlines:
            self.lines_before += newlines
            self.line_start = self.chars_before + text.rindex("\n") + 1
        self.chars_before += len(text)

    def take_back(self, rest: bytes) -> None:
        """Goes on as text from `rest`, the bytes that the reader of bytes left (the
        decoder still holds a character cut off at their end)."""
        held = len(self.decoder.getstate()[0])
        self.text, self.pos = rest[: len(rest) - held].decode(), 0

    def more(self) -> bool:
        """Reads another piece of the file; False at its end."""
        if self.eof:
            return False
        data, piece = self.read_bytes()
        if self.pos > len(self.text) // 2:  # drop what was consumed
            self.passed(self.text[: self.pos])
            self.text = self.text[self.pos :]
            self.pos = 0
        self.text += piece
        return bool(data) or bool(piece)

    def where(self, index: int) -> str:
        """'line L, column C' of a character index into `text`."""
        head = self.text[:index]
        newlines = head.count("\n")
        line = self.lines_before + newlines + 1
        if newlines:
            column = index - head.rindex("\n")
        else:
            column = self.chars_before + index - self.line_start + 1
        return f"line {line:,}, column {column:,}"

    def skip_ws(self) -> str:
        """The next non-blank character (not consumed), '' at the end of the file."""
        while True:
            self.pos = _WS.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if c == "" or c not in chars:
            found = f"{c!r}" if c else "the end of the file"
            raise JsonStreamError(f"{self.where(self.pos)}: expected {what}, found {found}")
        self.pos += 1
        return c

    def value(self, decoder: json.JSONDecoder, what: str):
        """Decodes the value at `pos` (at most MAX_VALUE_CHARS), reading more as needed."""
        self.skip_ws()
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
                if end < len(self.text) or self.eof:  # a number at the window's end may go on
                    self.pos = end
                    return value
                error = None
            except json.JSONDecodeError as exc:
                cut_off = exc.pos >= len(self.text) - _TAIL or exc.msg.startswith("Unterminated string")
                if self.eof or not cut_off:
                    raise JsonStreamError(f"{self.where(exc.pos)}: {exc.msg} (in {what})") from None
                # said now: reading more may drop the text before it, moving its index
                error = f"{self.where(exc.pos)}: {exc.msg} (in {what})"
            except RecursionError:
                raise JsonStreamError(f"{self.where(self.pos)}: {what} is nested too deeply") from None
            except ValueError as exc:  # e.g. an integer of more digits than Python converts
                raise JsonStreamError(f"{self.where(self.pos)}: {what}: {exc}") from None
            if len(self.text) - self.pos > MAX_VALUE_CHARS:
                raise JsonStreamError(f"{self.where(self.pos)}: {what} is longer than {MAX_VALUE_CHARS:,} characters")
            if not self.more() and error is not None:
                raise JsonStreamError(error) from None


def read_object(fh, streamed: str, element: Callable[[int, object], None], array=None) -> dict:
    """Reads the JSON object in binary file `fh`: calls element(i, value) for each
    element of member `streamed` (an array), and returns the other members, with
    `streamed` mapped to its number of elements when it was there. `array`, when
    given, reads a non-empty `streamed` array instead: array(window) from its first
    element on, through its closing bracket, returning how many elements it read."""
    w = _Window(fh)
    decoder = json.JSONDecoder()
    members = {}
    w.expect("{", "a JSON object '{'")
    if w.skip_ws() == "}":
        w.pos += 1
    else:
        while True:
            w.skip_ws()
            key = w.value(decoder, "a member name")
            if not isinstance(key, str):
                raise JsonStreamError(f"{w.where(w.pos)}: a member name must be a string, found {key!r}")
            w.expect(":", "':' after a member name")
            if key == streamed:
                members[key] = members.get(key, 0) + _array(w, decoder, streamed, element, array)
            else:
                members[key] = w.value(decoder, f"member {key!r}")
            if w.expect(",}", "',' or '}' in the top-level object") == "}":
                break
    if w.skip_ws() != "":
        raise JsonStreamError(f"{w.where(w.pos)}: extra data after the top-level object")
    return members


def _array(w: _Window, decoder: json.JSONDecoder, key: str, element, array) -> int:
    w.expect("[", f"an array for {key!r}")
    if w.skip_ws() == "]":
        w.pos += 1
        return 0
    if array is not None:
        return array(w)
    i = 0
    while True:
        element(i, w.value(decoder, f"{key}[{i}]"))
        i += 1
        if w.expect(",]", f"',' or ']' after {key}[{i - 1}]") == "]":
            return i
