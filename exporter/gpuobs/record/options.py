"""The record options, read from their one table (schemas/gpuobs_record_options.h),
which the tool reads too (tool/config.cpp). From the rows come RecordOptions, the
tool's environment (run.tool_environment), gpuobs.attach()'s keywords and the
`gpuobs record` command's options; a row's bounds, default and help live there only.

cffi reads the header's declarations (the kinds and flags); the rows, a macro that
cffi cannot read, are read here as C tokens: `X(name, .field = value, ...)`, a value
being string literals (joined, as C joins them) or a whole-number expression.
tests/test_record_options.py compares the result with what the compiled tool sees."""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cffi import FFI

from ..native_sources import native_root
from ..recording_file import schema

HEADER_NAME = "gpuobs_record_options.h"
TABLE_MACRO = "#define GPUOBS_RECORD_OPTIONS(X)"


def header_path() -> Path:
    return native_root() / "schemas" / HEADER_NAME


@lru_cache(maxsize=1)
def _declarations():
    ffi = FFI()
    ffi.cdef(schema.cdef_text(header_path().read_text()))
    return ffi.dlopen(None)


def _constant(name: str) -> int:
    return getattr(_declarations(), name)


@dataclass(frozen=True)
class RecordOption:
    name: str  # RecordOptions' field and attach()'s keyword
    env: str
    kind: int  # enum gpuobs_option_kind
    fallback: str  # the default as the variable holds it
    lo: int = 0
    hi: int = 0
    flags: int = 0
    choices: str = ""
    aliases: str = ""
    old_env: str = ""
    cli: str = ""
    metavar: str = ""
    unit: str = ""
    help: str = ""

    def has(self, flag_name: str) -> bool:
        return bool(self.flags & _constant(f"GPUOBS_OPTION_{flag_name}"))

    def is_kind(self, *kind_names: str) -> bool:
        return self.kind in {_constant(f"GPUOBS_OPTION_{k}") for k in kind_names}

    @property
    def words(self) -> list[str]:
        """What a MODE or CHOICE option takes, in index order (aliases are the tool's alone)."""
        if self.is_kind("MODE"):
            return list(schema.MODE_NAMES.values())
        return self.choices.split()

    @property
    def python_type(self) -> type:
        if self.is_kind("WHOLE"):
            return int
        if self.is_kind("SWITCH"):
            return bool
        return Path if self.is_kind("PATH") else str

    @property
    def default(self):
        """The default as Python holds it: int, bool, Path or str."""
        if self.is_kind("WHOLE"):
            return int(self.fallback)
        if self.is_kind("SWITCH"):
            return self.fallback != "0"
        return Path(self.fallback) if self.is_kind("PATH") else self.fallback

    @property
    def flag(self) -> str:
        """The CLI's long name ("--sample-shift"), or "" where the CLI has none."""
        return next((n for n in self.cli.split() if n.startswith("--")), "")

    @property
    def help_text(self) -> str:
        said = said_duration if self.is_kind("DUTY") else str
        return self.help.replace("{lo}", said(self.lo)).replace("{hi}", said(self.hi))

    def env_text(self, value) -> str:
        """The value as the tool's variable carries it."""
        if self.is_kind("SWITCH"):
            return "1" if value else "0"
        if self.is_kind("DUTY"):
            duty = parse_duty(value)
            return f"{duty[0]}/{duty[1]}" if duty else str(value)  # nanoseconds; a bad one for the tool to refuse
        if self.is_kind("PATH"):
            return str(Path(value).resolve())
        return str(value)

    def problem(self, value, said: str) -> str | None:
        """Why the tool would refuse the value, said after `said` (the option as the
        caller wrote it, e.g. "--capacity 100"); None when it is good."""
        if self.is_kind("WHOLE"):
            if self.has("ZERO_FITS") and value == 0:
                return None
            if not self.lo <= value <= self.hi:
                return f"{said}{' ' + self.unit if self.unit else ''} is outside {self.lo}..{self.hi}" + (
                    " (or 0: what fits)" if self.has("ZERO_FITS") else ""
                )
        elif self.is_kind("MODE", "CHOICE"):
            if value not in self.words:
                return f"{said} is not {said_list(self.words)}"
        elif self.is_kind("PATH") and str(value) == "":
            return f"{said} is empty"
        elif self.is_kind("DUTY") and value != "":
            duty = parse_duty(value)
            if duty is None:
                return f"{said} is not ON/PERIOD, two durations such as 50ms/5s (ns, us, ms or s)"
            on, period = duty
            if not self.lo <= period <= self.hi:
                return f"{said}: the period is outside {said_duration(self.lo)}..{said_duration(self.hi)}"
            if not 0 < on < period:
                return f"{said}: ON must be more than 0 and less than PERIOD"
        return None


_DURATION = re.compile(r"(\d+)(?:\.(\d{1,9}))?(ns|us|ms|s)?")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(text: str) -> int | None:
    """Nanoseconds of '50ms', '1.5s', '250us' or a bare '1000' (ns); None if it is not
    one, or its nanoseconds are not whole. The tool reads them alike (tool/config.cpp)."""
    m = _DURATION.fullmatch(text)
    if not m or (m.group(2) and not m.group(3)):
        return None
    scale = _UNIT_NS[m.group(3) or "ns"]
    frac = m.group(2) or ""
    part, rest = divmod(int(frac or 0) * scale, 10 ** len(frac))
    return None if rest else int(m.group(1)) * scale + part


def parse_duty(text: str) -> tuple[int, int] | None:
    """(ON, PERIOD) in nanoseconds of 'ON/PERIOD'; None if either is not a duration."""
    on, slash, period = str(text).partition("/")
    if not slash:
        return None
    on_ns, period_ns = parse_duration(on), parse_duration(period)
    return None if on_ns is None or period_ns is None else (on_ns, period_ns)


def said_duration(ns: int) -> str:
    """The largest unit that says `ns` whole: 1000000 -> '1ms'."""
    for unit in ("s", "ms", "us"):
        if ns % _UNIT_NS[unit] == 0:
            return f"{ns // _UNIT_NS[unit]}{unit}"
    return f"{ns}ns"


def said_list(words: list[str]) -> str:
    """'a or b', 'a, b or c'; a longer list 'one of a, b, c, d' (as the tool says them)."""
    if len(words) > 3:
        return "one of " + ", ".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else "".join(words)


_TOKEN = re.compile(r'\s+|(?P<str>"(?:\\.|[^"\\])*")|(?P<num>0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(?P<id>\w+)|(?P<op><<|.)')
_OPS = {ast.LShift: operator.lshift, ast.BitOr: operator.or_, ast.Add: operator.add, ast.Mult: operator.mul}


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind is not None:
            out.append((kind, m.group(kind)))
    return out


def _c_string(literal: str) -> str:
    return ast.literal_eval(literal)  # the table's literals use only \" and \\ escapes, which Python reads alike


def _value(tokens: list[tuple[str, str]]):
    if tokens and all(kind == "str" for kind, _ in tokens):
        return "".join(_c_string(text) for _, text in tokens)
    expr = " ".join(text for _, text in tokens)

    def evaluate(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return _constant(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise ValueError(f"{HEADER_NAME}: cannot read the value {expr!r}")

    return evaluate(ast.parse(expr, mode="eval").body)


def _rows(header_text: str) -> list[list[tuple[str, str]]]:
    """Each X(...) row's tokens, its parentheses stripped."""
    start = header_text.index(TABLE_MACRO) + len(TABLE_MACRO)
    lines = []
    for line in header_text[start:].splitlines():
        lines.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    tokens = _tokens(" ".join(lines))
    rows, depth, row = [], 0, []
    for i, (kind, text) in enumerate(tokens):
        if depth == 0:
            if (kind, text) == ("id", "X") and tokens[i + 1][1] == "(":
                row = []
            elif text == "(":
                depth = 1
            else:
                raise ValueError(f"{HEADER_NAME}: unexpected {text!r} between rows")
            continue
        depth += {"(": 1, ")": -1}.get(text, 0)
        if depth == 0:
            rows.append(row)
        else:
            row.append((kind, text))
    if depth != 0:  # a line without its backslash ends the macro inside a row
        raise ValueError(f"{HEADER_NAME}: the row after {rows[-1][0][1] if rows else 'the first'} is not closed")
    return rows


def _split_fields(row: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    parts, depth, part = [], 0, []
    for kind, text in row:
        depth += {"(": 1, ")": -1}.get(text, 0)
        if text == "," and depth == 0:
            parts.append(part)
            part = []
        else:
            part.append((kind, text))
    return parts + [part]


def parse_table(header_text: str) -> dict[str, RecordOption]:
    options = {}
    for row in _rows(header_text):
        name, *fields = _split_fields(row)
        values = {}
        for f in fields:
            if len(f) < 4 or f[0][1] != "." or f[2][1] != "=":
                raise ValueError(f"{HEADER_NAME}: row {name[0][1]}: a field is not `.name = value`")
            values[f[1][1]] = _value(f[3:])
        options[name[0][1]] = RecordOption(name=name[0][1], **values)
    return options


@lru_cache(maxsize=1)
def table() -> dict[str, RecordOption]:
    """The rows by name, in the table's order."""
    return parse_table(header_path().read_text())


OPTIONS = table()
