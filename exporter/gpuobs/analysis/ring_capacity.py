"""How many records `--capacity N` kept per context: the tool gives each SM's ring a
power of two, at least N over the rings in all (tool/ring_capacity.h; checked against
it by tests/test_ring_capacity.py). Recordings of tools that rounded down (older
schemas, see schema.COMPATIBLE_SCHEMAS' "capacity_rounding") kept at most N."""

from __future__ import annotations

from ..recording_file import schema


def per_ring(asked: int, rings: int, rounding: str = "up") -> int:
    """Records per ring for `asked` in all over `rings` rings."""
    rings = max(int(rings), 1)
    if rounding == "down":
        fits, cap = asked // rings, 1
        while cap * 2 <= fits:
            cap *= 2
        return cap
    wanted = -(-int(asked) // rings)
    cap = 1
    while cap < wanted:
        cap *= 2
    return cap


def kept(asked: int, sm_count: int, schema_hash: int) -> tuple[int, int, int] | None:
    """(records per ring, rings, records in all) a context of `sm_count` SMs kept for
    --capacity `asked`; None for 0 (the device memory budget decided)."""
    if not asked:
        return None
    rings = min(int(sm_count), schema.MAX_STRIPES) or 1
    rounding = schema.COMPATIBLE_SCHEMAS.get(schema_hash, {}).get("capacity_rounding", "up")
    each = per_ring(asked, rings, rounding)
    return each, rings, each * rings
