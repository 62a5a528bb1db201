"""Collects TracePackets, as protobuf messages or bulk-encoded rows, into one
trace file; hands out track uuids and sequence ids."""

from __future__ import annotations

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .protowire import Rows, tag, varint_bytes

TRACE_PACKET_FIELD = 1
SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
PACKET_TRACK_DESCRIPTOR = 60  # TracePacket.track_descriptor
# perfetto.protos.TrackDescriptor
TRACK_UUID = 1
TRACK_NAME = 2
TRACK_PARENT_UUID = 5
TRACK_SIBLING_ORDER_RANK = 12
TRACK_SIBLING_MERGE_BEHAVIOR = 15
TRACK_SIBLING_MERGE_KEY = 16
MERGE_BY_KEY = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
TRACK_BATCH = 1 << 16  # track descriptors encoded at once: a few MB of columns


class Texts:
    """Strings pooled as UTF-8: text i is chars[starts[i] : starts[i] + lengths[i]]
    (no Python string per text once made)."""

    def __init__(self, chars: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        self.chars = np.asarray(chars, np.uint8)
        self.starts = np.asarray(starts, np.int64)
        self.lengths = np.asarray(lengths, np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    @classmethod
    def of(cls, texts) -> "Texts":
        """Strings pooled; one that UTF-8 cannot encode (a lone surrogate) raises as its
        own .encode() does."""
        texts = texts if isinstance(texts, list) else list(texts)
        joined = "".join(texts)
        try:
            data = joined.encode()
        except UnicodeEncodeError:
            data = None
        if data is not None and len(data) == len(joined):  # ASCII: a byte per character
            lengths = np.fromiter(map(len, texts), np.int64, len(texts))
        else:
            encoded = [t.encode() for t in texts]
            data = b"".join(encoded)
            lengths = np.fromiter(map(len, encoded), np.int64, len(texts))
        starts = np.zeros(len(texts), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return cls(np.frombuffer(data, np.uint8), starts, lengths)

    def pick(self, index) -> "Texts":
        """Texts index[0], index[1], ... in a pool of their own (only their bytes)."""
        lengths = self.lengths[index]
        starts = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        total = int(lengths.sum())
        at = np.repeat(self.starts[index] - starts, lengths) + np.arange(total)
        return Texts(self.chars[at], starts, lengths)

    def take(self, index) -> "Texts":
        """Texts index[0], index[1], ... (the same pool)."""
        return Texts(self.chars, self.starts[index], self.lengths[index])

    @staticmethod
    def merged(parts: list, n: int | None) -> "Texts":
        """One pool of parts (rows, texts): texts[j] becomes text rows[j] of n (rows None:
        the texts follow the earlier parts' rows, n None: the parts' rows together)."""
        chars = np.concatenate([t.chars for _, t in parts]) if parts else np.zeros(0, np.uint8)
        rows_of, at = [], 0
        for rows, t in parts:
            rows_of.append(np.arange(at, at + len(t)) if rows is None else np.asarray(rows, np.int64))
            at = max(at + len(t), int(rows_of[-1].max()) + 1 if len(rows_of[-1]) else at)
        n = at if n is None else n
        starts, lengths = np.zeros(n, np.int64), np.zeros(n, np.int64)
        shift = 0
        for rows, (_, t) in zip(rows_of, parts):
            starts[rows], lengths[rows] = t.starts + shift, t.lengths
            shift += len(t.chars)
        return Texts(chars, starts, lengths)

    def __getitem__(self, i: int) -> str:
        a = int(self.starts[i])
        return self.chars[a : a + int(self.lengths[i])].tobytes().decode()


class NumberedTexts:
    """Texts of which some are numbered: text i is affixes[k - 1]'s prefix, numbers[i] in
    decimal and its suffix where form[i] is k > 0, else the pool's text i (pool None: every
    text numbered). The C track encoder writes the numbered ones itself, with no pool of
    them; texts() pools them all (numbered(): the same texts)."""

    def __init__(self, pool: Texts | None, form: np.ndarray, numbers: np.ndarray, affixes: tuple):
        self.pool, self.affixes = pool, tuple(affixes)  # affixes: (prefix, suffix) str pairs
        self.form = np.asarray(form, np.uint8)
        self.numbers = np.asarray(numbers, np.uint64)

    def __len__(self) -> int:
        return len(self.form)

    def take(self, index) -> "NumberedTexts":
        pool = None if self.pool is None else self.pool.take(index)
        return NumberedTexts(pool, self.form[index], self.numbers[index], self.affixes)

    @staticmethod
    def merged(parts: list, n: int, affixes: tuple) -> "NumberedTexts":
        """Texts.merged of parts (rows, Texts or NumberedTexts of these affixes)."""
        form, numbers, pools = np.zeros(n, np.uint8), np.zeros(n, np.uint64), []
        for rows, t in parts:
            if isinstance(t, NumberedTexts):
                if t.affixes != tuple(affixes):
                    raise ValueError("NumberedTexts merged with other affixes")
                form[rows], numbers[rows] = t.form, t.numbers
                if t.pool is not None:
                    pools.append((rows, t.pool))
            else:
                pools.append((rows, t))
        return NumberedTexts(Texts.merged(pools, n), form, numbers, affixes)

    def texts(self) -> Texts:
        """The same texts, pooled."""
        parts = [] if self.pool is None else [(np.flatnonzero(self.form == 0), self.pool.take(self.form == 0))]
        for k, (prefix, suffix) in enumerate(self.affixes, 1):
            rows = np.flatnonzero(self.form == k)
            parts.append((rows, numbered(prefix, self.numbers[rows], suffix)))
        return Texts.merged(parts, len(self))


def pooled(texts) -> Texts:
    """Texts as they are, NumberedTexts pooled."""
    return texts.texts() if isinstance(texts, NumberedTexts) else texts


def _decimal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each non-negative value's decimal digits as (n, width) ASCII right-aligned, and its digit count."""
    v = np.asarray(values, np.uint64)
    width = max(1, len(str(int(v.max())))) if len(v) else 1
    digits = np.empty((len(v), width), np.uint8)
    count = np.ones(len(v), np.int64)
    rest = v.copy()
    for k in range(width - 1, -1, -1):
        digits[:, k] = (rest % np.uint64(10)).astype(np.uint8) + ord("0")
        rest //= np.uint64(10)
        count += (rest != 0) & (k > 0)
    return digits, count


def numbered(prefix: str, values, suffix: str = "") -> Texts:
    """f"{prefix}{value}{suffix}" of every non-negative integer value, pooled: in C
    (native_encoder.c) where it is built, else by numpy columns (the same pool)."""
    from . import native_encoder

    if native_encoder.encoder() is not None:
        return Texts(*native_encoder.numbered(prefix.encode(), values, suffix.encode()))
    return _numbered_numpy(prefix, values, suffix)


def _numbered_numpy(prefix: str, values, suffix: str = "") -> Texts:
    """numbered by numpy columns: the digits as a right-aligned matrix, the padding dropped."""
    digits, count = _decimal(values)
    head, tail = np.frombuffer(prefix.encode(), np.uint8), np.frombuffer(suffix.encode(), np.uint8)
    n, width = digits.shape
    row = np.zeros((n, len(head) + width + len(tail)), np.uint8)
    row[:, : len(head)] = head
    row[:, len(head) : len(head) + width] = digits
    row[:, len(head) + width :] = tail
    lengths = len(head) + count + len(tail)
    keep = np.ones(row.shape, bool)
    keep[:, len(head) : len(head) + width] = np.arange(width)[None, :] >= (width - count)[:, None]
    starts = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return Texts(row[keep], starts, lengths)


class TraceWriter:
    def __init__(self):
        self._chunks: list[bytes] = []
        self._next_uuid = 1
        self._next_seq = 1
        self.tracks = 0

    def new_sequence(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def packet(self, pkt: pb.TracePacket) -> None:
        data = pkt.SerializeToString()
        self._chunks.append(tag(TRACE_PACKET_FIELD, 2) + varint_bytes(len(data)) + data)

    def raw(self, encoded_packets: bytes) -> None:
        """Packets already encoded as Trace.packet entries."""
        self._chunks.append(encoded_packets)

    def rows(self, rows: Rows) -> None:
        if rows.n:
            self._chunks.append(rows.as_field(TRACE_PACKET_FIELD).tobytes())

    def track(
        self,
        name: str,
        parent: int | None = None,
        description: str | None = None,
        explicit_order: bool = False,
        rank: int | None = None,
        merge_key: str | None = None,
        counter_unit: str | None = None,
    ) -> int:
        uuid = self._next_uuid
        self._next_uuid += 1
        desc = pb.TrackDescriptor(uuid=uuid, name=name)
        if parent is not None:
            desc.parent_uuid = parent
        if description:
            desc.description = description
        if explicit_order:
            desc.child_ordering = pb.TrackDescriptor.EXPLICIT
        if rank is not None:
            desc.sibling_order_rank = rank
        if merge_key is not None:
            desc.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
            desc.sibling_merge_key = merge_key
        if counter_unit is not None:
            desc.counter.unit_name = counter_unit
        self.packet(pb.TracePacket(track_descriptor=desc))
        self.tracks += 1
        return uuid

    def track_batch(self, names, parents=None, ranks=None, merge_keys=None, merged=None):
        """n tracks at once, the same bytes as n calls of track(names[i], parent=parents[i],
        rank=ranks[i], merge_key=merge_keys[i] where merged[i]): their uuids, in order.
        `names` and `merge_keys` are Texts or NumberedTexts (merge_keys None: none);
        `parents` and `ranks` (non-negative) are arrays or None (none given); `merged`, a
        bool mask of the tracks with a merge key (all where None). Encoded in C
        (native_encoder.c) where it is built, else by numpy columns: the same bytes."""
        from . import native_encoder  # cffi loaded only where tracks are made in bulk

        n = len(names)
        first = self._next_uuid
        uuids = np.arange(first, first + n, dtype=np.uint64)
        self._next_uuid += n
        self.tracks += n
        native = native_encoder.encoder() is not None
        for a in range(0, n, TRACK_BATCH):  # a few MB of packets at a time, either way
            b = min(n, a + TRACK_BATCH)
            part = (
                names.take(slice(a, b)),
                None if parents is None else parents[a:b],
                None if ranks is None else ranks[a:b],
                None if merge_keys is None else merge_keys.take(slice(a, b)),
                None if merged is None else merged[a:b],
            )
            packets = native_encoder.encode_track_descriptors(first + a, *part) if native else None
            if packets is not None:
                if len(packets):
                    self._chunks.append(packets)  # the array itself, as raw() takes them: no copy of it
            else:
                names_part, parents_part, ranks_part, keys_part, merged_part = part
                keys_part = None if keys_part is None else pooled(keys_part)
                names_part = pooled(names_part)
                self.rows(self._track_rows(uuids[a:b], names_part, parents_part, ranks_part, keys_part, merged_part))
        return uuids

    @staticmethod
    def _track_rows(uuids, names: Texts, parents, ranks, merge_keys: Texts | None, merged) -> Rows:
        """track_batch's packets as protowire columns (the numpy path)."""
        desc = Rows(len(uuids)).varint_field(TRACK_UUID, uuids)
        desc.bytes_field(TRACK_NAME, names.chars, names.starts, names.lengths)
        if parents is not None:
            desc.varint_field(TRACK_PARENT_UUID, np.asarray(parents, np.uint64))
        if ranks is not None:
            desc.varint_field(TRACK_SIBLING_ORDER_RANK, np.asarray(ranks, np.uint64))
        if merge_keys is not None:
            present = None if merged is None else np.asarray(merged, bool)
            desc.raw(tag(TRACK_SIBLING_MERGE_BEHAVIOR, 0) + varint_bytes(MERGE_BY_KEY), present)
            desc.bytes_field(TRACK_SIBLING_MERGE_KEY, merge_keys.chars, merge_keys.starts, merge_keys.lengths, present)
        return Rows(len(uuids)).message_field(PACKET_TRACK_DESCRIPTOR, desc)

    def size(self) -> int:
        return sum(len(c) for c in self._chunks)

    def save(self, target) -> int:
        """Writes the trace to a path or to an open binary file (gpuobs.outputs)."""
        if hasattr(target, "write"):
            for chunk in self._chunks:
                target.write(chunk)
            return self.size()
        with open(target, "wb") as fh:
            return self.save(fh)
