"""A recording's notices and CUDA API names, kept as columns: the texts' bytes in one
string, the numbers in arrays, decoded only where they are read. A recording may hold
a million of either (each chunk a few dozen bytes); a Python object each cost about
a microsecond and 200 bytes, and `info` shows 50 notices, `export` none."""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import schema


@dataclass
class Notice:
    """Something the tool could not record, or made the program do, and why (also said on stderr)."""

    device_index: int  # 0xFFFFFFFF: no one device
    code: str  # schema.NoticeCode name, lower case
    monotonic_ns: int
    text: str


INDEXED_BYTES_PER_TEXT = 32  # texts this short on average are gathered by one index array


def copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The bytes of data[start : start + length] for each range, joined. Short texts are
    gathered at once by an index of every byte (8 bytes of index per byte, so only where
    the texts are short); long ones slice by slice, which costs per byte, not per text."""
    starts, lengths = starts.astype(np.int64), lengths.astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return b""
    if total <= INDEXED_BYTES_PER_TEXT * len(lengths):
        first = np.cumsum(lengths) - lengths  # of each text in the result
        return data[np.repeat(starts - first, lengths) + np.arange(total)].tobytes()
    return b"".join(data[a : a + n].tobytes() for a, n in zip(starts.tolist(), lengths.tolist()))


class Texts(Sequence):
    """Texts as one byte string and each one's end in it; str(text) decodes as the
    reader always did (invalid UTF-8 replaced)."""

    def __init__(self, data: bytes = b"", ends: np.ndarray | None = None):
        self.data = data
        self.ends = np.zeros(0, np.int64) if ends is None else ends

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = range(len(self))[i]  # negative indices, and IndexError past the end
        begin = int(self.ends[i - 1]) if i else 0
        return self.data[begin : int(self.ends[i])].decode(errors="replace")

    def __iter__(self):
        bounds = self.ends.tolist()
        for a, b in zip([0] + bounds[:-1], bounds):
            yield self.data[a:b].decode(errors="replace")

    def decoded(self) -> list[str]:
        """Every text: without a per-text decode where the bytes allow (none, or ASCII)."""
        n = len(self.ends)
        if not self.data:
            return [""] * n
        if self.data.isascii():
            whole = self.data.decode("ascii")
            bounds = self.ends.tolist()
            return [whole[a:b] for a, b in zip([0] + bounds[:-1], bounds)]
        return list(self)


class TextColumns:
    """Rows of numbers with a text each, appended one by one or a run at a time, as
    array columns and one byte string (what a row costs: its numbers and its bytes)."""

    def __init__(self, columns: dict):
        self.columns = {name: array.array(code) for name, code in columns.items()}
        self.lengths = array.array("q")
        self.data = bytearray()

    def add(self, text: bytes, **values) -> None:
        for name, value in values.items():
            self.columns[name].append(value)
        self.lengths.append(len(text))
        self.data += text

    def extend(self, text: bytes, lengths: np.ndarray, **values) -> None:
        for name, column in values.items():
            self.columns[name].frombytes(np.ascontiguousarray(column, self.columns[name].typecode).tobytes())
        self.lengths.frombytes(np.ascontiguousarray(lengths, np.int64).tobytes())
        self.data += text

    def column(self, name: str) -> np.ndarray:
        """A column as an array over the column's own memory (no row is added after)."""
        c = self.columns[name]
        return np.frombuffer(c, c.typecode) if len(c) else np.zeros(0, c.typecode)

    def texts(self) -> Texts:
        lengths = np.frombuffer(self.lengths, np.int64) if len(self.lengths) else np.zeros(0, np.int64)
        return Texts(bytes(self.data), np.cumsum(lengths))


def notice_code_name(code: int) -> str:
    member = schema.NoticeCode._value2member_map_.get(code)
    return member.name.lower() if member is not None else f"code{code}"


NOTICE_COLUMNS = {"device_index": "I", "code": "I", "monotonic_ns": "Q"}


class Notices(Sequence):
    """The recording's notices in file order: Notice records made when read."""

    def __init__(self, rows: TextColumns | None = None):
        rows = rows or TextColumns(NOTICE_COLUMNS)
        self.device_index = rows.column("device_index")
        self.code = rows.column("code")
        self.monotonic_ns = rows.column("monotonic_ns")
        self._texts = rows.texts()

    def __len__(self) -> int:
        return len(self._texts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        code = int(self.code[i])
        return Notice(int(self.device_index[i]), notice_code_name(code), int(self.monotonic_ns[i]), self._texts[i])

    def __iter__(self):
        names = {code: notice_code_name(code) for code in np.unique(self.code).tolist()}
        for device, code, ns, text in zip(
            self.device_index.tolist(), self.code.tolist(), self.monotonic_ns.tolist(), self._texts.decoded()
        ):
            yield Notice(device, names[code], ns, text)

    def texts(self) -> list[str]:
        """Every notice's text, in file order (no Notice made)."""
        return self._texts.decoded()

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or len(self) != len(other):
            return False
        return list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        shown = list(self[:3])
        more = f", ... {len(self) - 3:,} more" if len(self) > 3 else ""
        return f"Notices({shown!r}{more})"


API_NAME_COLUMNS = {"api_id": "I"}


class ApiNames(Mapping):
    """api_id -> CUDA API function name, as a dict read in file order (a later name of
    an id replaces the earlier): made at the first lookup, which only a recording with
    API calls needs."""

    def __init__(self, rows: TextColumns | None = None):
        rows = rows or TextColumns(API_NAME_COLUMNS)
        self.api_id = rows.column("api_id")
        self._texts = rows.texts()
        self._dict: dict | None = None

    def _names(self) -> dict:
        if self._dict is None:
            self._dict = dict(zip(self.api_id.tolist(), self._texts.decoded()))
        return self._dict

    def __getitem__(self, api_id) -> str:
        return self._names()[api_id]

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return f"ApiNames({len(self):,} names)"
