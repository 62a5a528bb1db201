"""Text that came from a file, made safe to write and to show. A JSON "\ud800" or a
file name that is not UTF-8 (held as surrogates by Python) cannot be encoded as
UTF-8; control characters and bidirectional overrides in a kernel name, argv or
notice would drive the terminal (clear it, recolour it, reverse the line)."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _surrogate(m: re.Match) -> str:
    code = ord(m.group())
    # U+DC80..U+DCFF: an undecodable byte kept by surrogateescape (file names, argv)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def readable(text: str) -> str:
    """`text` with lone surrogates as `\\xNN` (an undecodable byte) or `\\uNNNN`: encodable as UTF-8."""
    return _SURROGATE.sub(_surrogate, text) if _SURROGATE.search(text) else text


def printable(text: str) -> str:
    """readable(text) with control characters shown as escapes (`\\x1b`, `\\u202e`), for a terminal."""
    text = readable(text)
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_escape, text)


def _escape(m: re.Match) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
