"""The few numbers `gpuobs record`'s summary needs of each chunk that grows with a
run's launches: a LAUNCHES chunk's rows (how many, how many launched by kernels or
inside a conditional node's body), a FLUSH chunk's counted total (its counter slots,
each slot once) and an API_CALLS chunk's rows (--api-trace). Each is a pure function of the chunk's bytes, so it can be
worked out while the program still runs (record/follower.py) and added up at its
exit, where the rest of the summary reads only small chunks (record/finish.py).

A chunk's facts are kept under its offset with its header's type, flags, length and
CRC: a later read uses them only for the same chunk at the same place."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import GpuobsError
from ..recording_file import packed_chunks, schema
from ..recording_file import recording_checks as checks
from ..recording_file.fileformat import CHUNK_HEADER, CRC_COVERED_HEADER_BYTES, chunk_crc
from ..recording_file.reader import CHUNK_HEAD

ChunkType = schema.ChunkType
GROWING = (ChunkType.LAUNCHES, ChunkType.FLUSH, ChunkType.API_CALLS)  # the chunk types whose facts are kept
LAUNCH = schema.dtype("gpuobs_launch")
API_CALL = schema.dtype("gpuobs_api_call")
LAUNCH_COUNT = schema.dtype("gpuobs_launch_count")
FLUSH_INFO = schema.dtype("gpuobs_flush_info")
PACKED_HEADER = packed_chunks.PACKED_HEADER
FROM_DEVICE = int(schema.LaunchFlag.FROM_DEVICE)
CONDITIONAL_BODY = int(schema.LaunchFlag.CONDITIONAL_BODY)


@dataclass(frozen=True)
class ChunkFacts:
    launches: int = 0
    from_device: int = 0
    conditional_body: int = 0
    counted: int = 0  # FLUSH: exact blocks or accesses of its window, every counter slot once
    api_calls: int = 0
    flush_info_at: int = 0  # FLUSH: where its gpuobs_flush_info is in the file (packed or not)


class FactsError(GpuobsError, ValueError):
    """The chunk does not hold what its header says, said as the reader says it
    ("FLUSH chunk: ...")."""


def facts_of(header: bytes, payload, offset: int, table_size: int) -> ChunkFacts:
    """The facts of the growing chunk at `offset` (its header's bytes and payload): its
    CRC and values checked as the reader checks them, else FactsError."""
    ctype, flags, length, crc = CHUNK_HEAD.unpack_from(header)
    name = ChunkType(ctype).name
    payload = memoryview(payload)
    if len(payload) != length:
        raise FactsError(f"{name} chunk: payload of {len(payload)} bytes where the header says {length}")
    found = chunk_crc(memoryview(header)[:CRC_COVERED_HEADER_BYTES], payload)
    if found != crc:
        raise FactsError(f"{name} chunk fails its CRC-32 (stored {crc:#010x}, computed {found:#010x})")
    info_at = offset + CHUNK_HEADER.itemsize
    try:
        if flags:
            if flags & ~packed_chunks.KNOWN_FLAGS:
                raise FactsError(f"flags {flags:#x} hold bits this gpuobs does not know (a newer writer's encoding)")
            info_at += PACKED_HEADER.itemsize  # the packed FLUSH keeps its gpuobs_flush_info as it is
            payload = memoryview(packed_chunks.unpack(payload, ctype))
        if ctype == ChunkType.LAUNCHES:
            return _launch_facts(payload)
        if ctype == ChunkType.FLUSH:
            return _flush_facts(payload, table_size, info_at)
        return ChunkFacts(api_calls=len(_rows(payload, API_CALL, checks.check_api_calls)))
    except (FactsError, packed_chunks.PackError) as exc:
        raise FactsError(f"{name} chunk: {exc}") from None
    except checks.BadValue as bad:
        where = f"{bad.what} {bad.row}: " if bad.row is not None else ""
        raise FactsError(f"{name} chunk: {where}{bad}") from None


def _rows(payload: memoryview, dt: np.dtype, check) -> np.ndarray:
    if len(payload) % dt.itemsize:
        raise FactsError(f"{len(payload)} payload bytes are not a whole number of {dt.itemsize}-byte rows")
    rows = np.frombuffer(payload, dt)
    check(rows)
    return rows


def _launch_facts(payload: memoryview) -> ChunkFacts:
    rows = _rows(payload, LAUNCH, checks.check_launches)
    flags = rows["flags"]
    return ChunkFacts(
        launches=len(rows),
        from_device=int(np.count_nonzero(flags & FROM_DEVICE)),
        conditional_body=int(np.count_nonzero(flags & CONDITIONAL_BODY)),
    )


def _flush_facts(payload: memoryview, table_size: int, info_at: int) -> ChunkFacts:
    if len(payload) < FLUSH_INFO.itemsize:
        raise FactsError(f"{len(payload)} payload bytes; gpuobs_flush_info needs {FLUSH_INFO.itemsize}")
    info = np.frombuffer(payload, FLUSH_INFO, 1)[0]
    n = int(info["launch_count_len"])
    if len(payload) != FLUSH_INFO.itemsize + n * LAUNCH_COUNT.itemsize:
        raise FactsError(f"declares {n} launch counts but has {len(payload) - FLUSH_INFO.itemsize} bytes for them")
    counts = np.frombuffer(payload, LAUNCH_COUNT, n, FLUSH_INFO.itemsize)
    checks.check_flush(info, counts)
    # Launches that shared a counter slot carry its one total each (analysis/launches.count_slots).
    slots = counts["grid_id"] & np.uint64(table_size - 1)
    _, first = np.unique(slots, return_index=True)
    return ChunkFacts(counted=sum(counts["count"][first].tolist()), flush_info_at=info_at)


@dataclass
class FactsCache:
    """Facts of one file's growing chunks, by offset, as a follower found them; `until`:
    the offset up to which every chunk was looked at (the next one not yet whole)."""

    identity: tuple  # (st_dev, st_ino) of the file the facts are of
    table_size: int = 0
    chunks: dict = field(default_factory=dict)  # offset -> ((type, flags, length, crc), ChunkFacts)
    until: int = 0

    def get(self, offset: int, header: tuple) -> ChunkFacts | None:
        kept = self.chunks.get(offset)
        return kept[1] if kept is not None and kept[0] == header else None
