"""START:END ranges and durations as users type them in options (`export --launches`,
`--time-window`, `trim --flushes`)."""
from __future__ import annotations

import re
from typing import Optional

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


class RangeError(Exception):
    """An option's range or duration cannot be read; the message names the option and the text."""


def parse_duration(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise RangeError(f"time {text!r} is not a number with an optional unit (ns, us, ms, s)")
    return int(float(m.group(1)) * _UNITS[m.group(2) or "ns"])


def parse_range(text: str, what: str, parse=int) -> tuple[Optional[int], Optional[int]]:
    """`what` is the option's name, for the message; an empty side is None."""
    if ":" not in text:
        raise RangeError(f"{what} {text!r} must look like START:END (either side may be empty)")
    lo, hi = text.split(":", 1)
    try:
        return (parse(lo) if lo.strip() else None, parse(hi) if hi.strip() else None)
    except ValueError as exc:
        raise RangeError(f"{what} {text!r}: {exc}") from None
