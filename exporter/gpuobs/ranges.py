"""START:END ranges and durations as users type them in options (`export --launches
10:`, `--time-window 1ms:5ms`, `trim --flushes 0:2`), and durations as gpuobs prints
them. Times are relative to the recording's start (its first device event) and need
a unit, so that a bare number is never silently read as nanoseconds."""

from __future__ import annotations

import re
from typing import Callable, Optional

from .errors import GpuobsError

UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


class RangeError(GpuobsError, ValueError):
    """An option's range or duration cannot be read; the message names the option and the text."""


def parse_duration(text: str) -> int:
    """`1.5ms` -> 1500000 (ns). A unit is required, except for 0."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise RangeError(f"time {text!r} is not a number with a unit (ns, us, ms, s), e.g. 1.5ms")
    if m.group(2) is None and float(m.group(1)) != 0:
        raise RangeError(
            f"time {text!r} has no unit: write {text.strip()}ns, {text.strip()}us, {text.strip()}ms or {text.strip()}s"
        )
    return int(round(float(m.group(1)) * UNITS[m.group(2) or "ns"]))


def parse_index(text: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", text):
        raise RangeError(f"{text.strip()!r} is not a whole number >= 0")
    return int(text)


def parse_range(text: str, what: str, parse: Callable[[str], int] = parse_index) -> tuple[Optional[int], Optional[int]]:
    """`A:B` -> (A, B), either side may be empty (None); END is excluded."""
    if ":" not in text:
        raise RangeError(f"{what} {text!r} must look like START:END (END excluded; either side may be empty)")
    lo_text, hi_text = text.split(":", 1)
    try:
        lo = parse(lo_text) if lo_text.strip() else None
        hi = parse(hi_text) if hi_text.strip() else None
    except ValueError as exc:
        raise RangeError(f"{what} {text!r}: {exc}") from None
    if lo is not None and hi is not None and hi <= lo:
        raise RangeError(f"{what} {text!r} is empty: END must be after START")
    return lo, hi


def parse_time_range(text: str, what: str) -> tuple[Optional[int], Optional[int]]:
    return parse_range(text, what, parse_duration)


def format_ns(ns: float) -> str:
    """A duration in the unit that reads best: 830 ns, 12.4 us, 3.215 ms, 1.204 s."""
    ns = float(ns)
    if abs(ns) < 1_000:
        return f"{ns:.0f} ns"
    if abs(ns) < 1_000_000:
        return f"{ns / 1e3:.1f} us"
    if abs(ns) < 1_000_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.3f} s"


def format_span(lo_ns: float, hi_ns: float) -> str:
    """`0..3.215 ms`, `1.200..3.215 ms`: a range relative to the recording's start."""
    hi = format_ns(hi_ns)
    number, unit = hi.split(" ")
    decimals = len(number.split(".")[1]) if "." in number else 0
    lo = float(lo_ns) / {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[unit]
    return f"{0 if lo_ns == 0 else format(lo, f'.{decimals}f')}..{hi}"
