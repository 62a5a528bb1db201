"""Tables as plain text, CSV or JSON, for `stats` and `info`. Plain text (not a
terminal widget) so that piped output never wraps or collapses columns: numbers
right-aligned, the name column last; where that is wider than the terminal (or
COLUMNS), each row's name on a line of its own above its numbers."""

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
    """Aligned columns separated by two spaces, the name (a left-aligned last column)
    last. `width`: the terminal's (or COLUMNS), None for no limit. Where a row would not
    fit, every row goes on two lines instead: its name, then its numbers under the
    header, so that nothing is cut but a name longer than the whole width."""
    cells = [[_cell(c, r.get(c.key)) for c in columns] for r in rows]
    widths = [max([len(c.title)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    named = bool(columns) and columns[-1].left

    def line(row, cols=columns, at=indent):
        parts = []
        for i, (c, text) in enumerate(zip(cols, row)):
            last = i == len(cols) - 1
            parts.append(text if last and c.left else text.ljust(widths[i]) if c.left else text.rjust(widths[i]))
        return (at + "  ".join(parts)).rstrip()

    lines = [line(row) for row in [[c.title for c in columns]] + cells]
    if width is None or all(len(text) <= width for text in lines) or not named:
        return "\n".join(lines)
    numbers = columns[:-1]
    stacked = [indent + columns[-1].title, line([c.title for c in numbers], numbers, indent + "  ")]
    for row in cells:
        name = indent + row[-1]
        stacked.append(name if len(name) <= width else name[: max(width - 3, 0)] + "...")
        stacked.append(line(row[:-1], numbers, indent + "  "))
    return "\n".join(stacked)


def render_csv(columns: list[Column], rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([c.title or c.key for c in columns])
    for r in rows:
        writer.writerow(["" if r.get(c.key) is None else r.get(c.key) for c in columns])
    return buf.getvalue()
