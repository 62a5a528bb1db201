"""A host trace's names as UTF-8 in one pool, read as the list of strings they
replace: an nsys file can give every row a name of its own (`string#N` for an id
StringIds lacks), and a Python string each, hashed and joined, cost more than
the rest of the read. Only valid UTF-8 goes in (text decoded with "replace" and
encoded again), so no name holds a surrogate."""

from __future__ import annotations

import numpy as np


class PooledNames:
    """Name i is chars[starts[i] : starts[i] + lengths[i]] decoded, or None where none[i]
    (a NULL StringIds value). `numbered` (prefix, values, rows), where given, says that
    name rows[j] is prefix + str(values[j]), values distinct: those names cannot equal one
    another, so finding equal names (merged_with) hashes only the others."""

    def __init__(self, chars, starts, lengths, none=None, numbered=None):
        self.chars = np.asarray(chars, np.uint8)
        self.starts, self.lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
        self.none = None if none is None or not np.any(none) else np.asarray(none, bool)
        self.numbered = numbered

    @classmethod
    def of(cls, names: list) -> "PooledNames":
        """Strings (each encodable as UTF-8) or None, pooled."""
        encoded = [b"" if n is None else n.encode() for n in names]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        none = np.fromiter((n is None for n in names), bool, len(names))
        return cls(np.frombuffer(b"".join(encoded), np.uint8), _starts(lengths), lengths, none)

    @classmethod
    def of_bytes(cls, names: list) -> "PooledNames":
        """Names already UTF-8 (valid), pooled."""
        lengths = np.fromiter(map(len, names), np.int64, len(names))
        return cls(np.frombuffer(b"".join(names), np.uint8), _starts(lengths), lengths)

    @classmethod
    def joined(cls, parts: list) -> "PooledNames":
        """The parts' names one after another (a `numbered` kept where one part has it)."""
        chars = np.concatenate([p.chars for p in parts]) if parts else np.zeros(0, np.uint8)
        shift = np.cumsum([0] + [len(p.chars) for p in parts[:-1]]) if parts else []
        starts = np.concatenate([p.starts + s for p, s in zip(parts, shift)]) if parts else np.zeros(0, np.int64)
        lengths = np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, np.int64)
        none = np.concatenate([np.zeros(len(p), bool) if p.none is None else p.none for p in parts]) if parts else None
        at = np.cumsum([0] + [len(p) for p in parts[:-1]]) if parts else []
        numbered = [(p.numbered, a) for p, a in zip(parts, at) if p.numbered is not None]
        if len(numbered) == 1:
            (prefix, values, rows), a = numbered[0]
            numbered = (prefix, values, rows + a)
        else:  # none, or two: their names could be equal across parts
            numbered = None
        return cls(chars, starts, lengths, none, numbered)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        i = range(len(self))[i]  # an int, negative from the end, as a list's
        if self.none is not None and self.none[i]:
            return None
        a = int(self.starts[i])
        return self.chars[a : a + int(self.lengths[i])].tobytes().decode()

    def __iter__(self):
        return iter(self._texts())

    def _texts(self, rows=None) -> list:
        data = self.chars.tobytes()
        rows = np.arange(len(self)) if rows is None else rows
        starts, ends = self.starts[rows].tolist(), (self.starts[rows] + self.lengths[rows]).tolist()
        texts = [data[a:b].decode() for a, b in zip(starts, ends)]
        if self.none is not None:
            for r in np.flatnonzero(self.none[rows]).tolist():
                texts[r] = None
        return texts

    def __eq__(self, other) -> bool:
        try:
            return list(self) == list(other)
        except TypeError:
            return NotImplemented

    __hash__ = None  # a list's

    def take(self, index) -> "PooledNames":
        """Names index[0], index[1], ... (the same pool)."""
        none = None if self.none is None else self.none[index]
        return PooledNames(self.chars, self.starts[index], self.lengths[index], none)

    def head(self, k: int) -> "PooledNames":
        """The first k names (the same pool), which of them are numbered kept."""
        none = None if self.none is None else self.none[:k]
        numbered = self.numbered
        if numbered is not None:
            prefix, values, rows = numbered
            numbered = (prefix, values[rows < k], rows[rows < k])
        return PooledNames(self.chars, self.starts[:k], self.lengths[:k], none, numbered)

    def codes_in(self, table: dict, default: int) -> np.ndarray:
        """table.get(name, default) of every name (None too), as int64: only names as long
        as some str key of the table in UTF-8 are read (a name per row seldom is)."""
        by_bytes = {}
        for key, value in table.items():
            if isinstance(key, str):
                try:
                    by_bytes[key.encode()] = value
                except UnicodeEncodeError:  # a lone surrogate: no pooled name holds one
                    continue
        out = np.full(len(self), default, np.int64)
        maybe = np.isin(self.lengths, np.fromiter(map(len, by_bytes), np.int64, len(by_bytes)))
        if self.none is not None:
            maybe &= ~self.none
        rows = np.flatnonzero(maybe)
        data = self.chars.tobytes()
        starts = self.starts[rows].tolist()
        ends = (self.starts[rows] + self.lengths[rows]).tolist()
        out[rows] = [by_bytes.get(data[a:b], default) for a, b in zip(starts, ends)]
        if self.none is not None and None in table:
            out[self.none] = table[None]
        return out

    def merged_with(self) -> np.ndarray | None:
        """Each name's first equal name (itself where none comes before it), or None
        where no two are equal. None equals None only."""
        numbered_rows = np.zeros(len(self), bool)
        if self.numbered is not None:
            numbered_rows[self.numbered[2]] = True
        loose = np.flatnonzero(~numbered_rows)
        data = self.chars.tobytes()
        keys = [data[a:b] for a, b in zip(self.starts[loose].tolist(), (self.starts + self.lengths)[loose].tolist())]
        if self.none is not None:
            for j in np.flatnonzero(self.none[loose]).tolist():
                keys[j] = None
        first: dict = {}
        same = [(row, first.setdefault(key, row)) for row, key in zip(loose.tolist(), keys)]
        same = [(row, to) for row, to in same if to != row]
        if self.numbered is not None:  # a loose name spelled as a numbered one
            prefix, values, rows = self.numbered
            spelled = _numbers_spelled(prefix, [k for k in first if k is not None and k.startswith(prefix)])
            if spelled:
                value_of = dict(zip(np.asarray(values).tolist(), np.asarray(rows).tolist()))
                for key, number in spelled.items():
                    row = value_of.get(number)
                    if row is not None:
                        same.append((row, first[key]))
        if not same:
            return None
        to = np.arange(len(self))
        rows, targets = zip(*same)
        to[list(rows)] = targets
        # the first of a group: the least row among its members
        least = np.arange(len(self))
        np.minimum.at(least, to, np.arange(len(self)))
        return least[to]


def _numbers_spelled(prefix: bytes, texts: list) -> dict:
    """{text: n} of the texts that are prefix + str(n) for an int n, exactly as str writes it."""
    found = {}
    for text in texts:
        rest = text[len(prefix) :]
        try:
            number = int(rest)
        except ValueError:
            continue
        if str(number).encode() == rest:
            found[text] = number
    return found


def _starts(lengths: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def numbered_names(prefix: str, values: np.ndarray) -> PooledNames:
    """f"{prefix}{v}" of each int64 value v (distinct), pooled: in C (the export's
    native_encoder.c) where it is built and no value is negative, else numbered_numpy."""
    values = np.asarray(values, np.int64)
    if not len(values) or int(values.min()) < 0:
        return numbered_numpy(prefix, values)
    from ..perfetto_export import native_encoder  # loaded by the export anyway; no protobuf

    if native_encoder.encoder() is None:
        return numbered_numpy(prefix, values)
    chars, starts, lengths = native_encoder.numbered(prefix.encode(), values.view(np.uint64), b"")
    return PooledNames(chars, starts, lengths, numbered=(prefix.encode(), values, np.arange(len(values))))


def numbered_numpy(prefix: str, values: np.ndarray) -> PooledNames:
    """numbered_names by numpy columns: the digits as a right-aligned matrix, a sign
    where negative, the padding dropped."""
    values = np.asarray(values, np.int64)
    head = np.frombuffer(prefix.encode(), np.uint8)
    negative = values < 0
    magnitude = values.view(np.uint64).copy()
    magnitude[negative] = np.uint64(0) - magnitude[negative]  # -2^63 too: two's complement
    width = len(str(int(magnitude.max()))) if len(values) else 1
    n = len(values)
    row = np.empty((n, len(head) + 1 + width), np.uint8)
    row[:, : len(head)] = head
    row[:, len(head)] = ord("-")
    count = np.ones(n, np.int64)
    rest = magnitude
    for k in range(width - 1, -1, -1):
        row[:, len(head) + 1 + k] = (rest % np.uint64(10)).astype(np.uint8) + ord("0")
        rest //= np.uint64(10)
        count += (rest != 0) & (k > 0)
    keep = np.ones(row.shape, bool)
    keep[:, len(head)] = negative
    keep[:, len(head) + 1 :] = np.arange(width)[None, :] >= (width - count)[:, None]
    lengths = len(head) + negative + count
    return PooledNames(row[keep], _starts(lengths), lengths, numbered=(prefix.encode(), values, np.arange(n)))
