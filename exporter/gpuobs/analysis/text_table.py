"""Tables as plain text, CSV or JSON, for `stats` and `info`. Plain text (not a
terminal widget) so that piped output never wraps or collapses columns: numbers
right-aligned, the name column last, cut to the terminal's width only on a terminal."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass


@dataclass
class Column:
    title: str
    key: str
    fmt: str = "{:,}"  # how a value is shown in text; None values show as "-"
    left: bool = False


def _cell(column: Column, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return column.fmt.format(value)


def render_text(columns: list[Column], rows: list[dict], width: int | None = None, indent: str = "  ") -> str:
    """Aligned columns separated by two spaces. `width`: a terminal's width, to which
    the last column (a name) is cut; None never cuts."""
    cells = [[_cell(c, r.get(c.key)) for c in columns] for r in rows]
    widths = [max([len(c.title)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = []
    for row in [[c.title for c in columns]] + cells:
        parts = []
        for i, (c, text) in enumerate(zip(columns, row)):
            last = i == len(columns) - 1
            parts.append(text if last and c.left else text.ljust(widths[i]) if c.left else text.rjust(widths[i]))
        line = (indent + "  ".join(parts)).rstrip()
        if width is not None and len(line) > width:
            line = line[: max(width - 3, 0)] + "..."
        lines.append(line)
    return "\n".join(lines)


def render_csv(columns: list[Column], rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([c.key for c in columns])
    for r in rows:
        writer.writerow(["" if r.get(c.key) is None else r.get(c.key) for c in columns])
    return buf.getvalue()
