"""Writes a variant of the shipped device patches for benchmarks/patch_ab.py,
made by replacing named pieces of device_patches/gpuobs_patches.cu, so that a
variant follows the shipped code instead of a stale copy. Each variant is a
question to measure on the GPU before building the change it stands for:

  store_only     (cost probe, block_starts) Every claim's atomic round trip replaced
                 by a position the warp computes from its block and warp index, as
                 per-launch record ranges handed out by the host would let it. Its
                 records land in wrong places and are never drained: it measures
                 what the round trips cost, nothing else. Near block_noop: per-launch
                 ranges are worth building (issue 17).
  exit_cta_scope (candidate, block_trace) The exit reads its block's slot at CTA
                 scope instead of GPU scope. The slot is written by the block's own
                 leader, on the same SM, so CTA scope is all the memory model asks
                 for, and such a load may be served from the SM's L1: of a block's
                 exiting warps, only the first should wait for L2. Predicted: part of
                 block_trace's cost over block_trace_noop on small-block kernels
                 (issue 16's graph kernels: 1.15-1.24x, target 1.10x). A load at
                 block exit may find the line gone from L1, or never there (stores
                 do not bring it); exit_cta_scope_prefetch also has the leader
                 prefetch its slot's line into L1 at entry, which no register waits for.

  starts_empty   (floor, block_starts) The entry patch returns at once: what the entry
                 costs with no record written (its checks, and its register saves
                 where it has any), inside the same A/B as the candidates.
  trace_exit_empty (split, block_trace) The exit patch returns at once, the entry
                 records as shipped: how much of block_trace over block_trace_noop is
                 the exit's slot read and stamps, how much the entry's claim and stores.
  exit_no_load   (cost probe, block_trace) The exit stamps its block's slot with two
                 fire-and-forget atomics at an address it computes, and loads nothing:
                 the exit of the "exit that never loads" design (device_patches/README.md).
                 Its records lose their ends (the stamps land in the slot, over its key):
                 it measures the exit's cost, nothing else.

  arrival_loads_first (candidate, block_starts) Each warp's arrival loads the entry's
                 stripe count and capacity before its claim instead of after it, so
                 the stores need not wait for a load once the claim returns (one
                 round trip fewer on the path; still 0 register saves on sm_90,
                 `patch_sass.py`). Predicted: a small gain where warps per block are
                 many (cuBLAS, SDPA), nothing on 4-warp blocks. Not GPU-run.

  slot_rings_compact (cost probe, block_starts) The design with no atomic at all:
                 every warp, the leader's too, writes one 16-byte record (time, grid
                 id's low bits, block, SM, slot) into a ring of its own SM warp slot,
                 at a position from that slot's counter, which only the slot's
                 occupant touches: a plain load (served from L1 when the slot's last
                 warp left it there) and a plain store. No block event: the host
                 would build blocks from their warps. Its records are never drained:
                 it measures the cost of that design's entry, nothing else. Measured
                 (docs/benchmarks.md): no better than store_only, and 12% slower than
                 the shipped atomics on torch_silu_mul. Rejected.
  compact_store_only (split, block_starts) As slot_rings_compact, at a position
                 computed from the block and warp index (store_only's), no counter:
                 against store_only what the record's size and stores cost, against
                 slot_rings_compact what the slot counter's load costs. Measured: as
                 store_only; the records' size is not what costs.

  compact_slot_atomics (split, block_starts) As slot_rings_compact with an atomic on
                 the slot's own counter (32 bytes from the next) instead of the plain
                 load and store: against the shipped per-SM atomics, what contention
                 costs; against compact_store_only, what one uncontended round trip does.
  compact_range_lookup (cost probe, block_starts) compact_store_only's position plus a
                 base found through two dependent loads L1 may serve (an entry by grid
                 id, then the word it points to): the path of per-grid record ranges
                 (device_patches/README.md) when its tables are in place.
  compact_no_loads (split, block_starts) compact_store_only with the ring's size as
                 constants instead of loads from the function entry: what those loads
                 cost every warp.

  compact_no_timer, compact_clock, compact_no_store, compact_leader_only (splits,
                 block_starts) compact_store_only without its %globaltimer reads, with
                 the SM's clock (a cheap counter, not comparable across SMs) in their
                 place, with its store compiled in but never issued, and written by
                 the block's first thread only (one record a block, not one a warp):
                 which of these is the 0-12% compact_store_only costs over the empty
                 entry.

  minimal_warp, minimal_warp_no_store (floor, block_starts) The cheapest per-warp record
                 there is (lane 0, the timer's low half, SM, slot, 1-D block and warp
                 index, one computed 16-byte store), with and without issuing its store:
                 what any design that records every warp pays at least. Measured
                 against the empty entry, it says whether issue 17's 1.05x can be met
                 by a design whose ends are sound (which needs every warp's slot).

  range_warp_eager, range_warp_graph (cost probe, block_starts) What a shippable cheap
                 per-warp record would run: minimal_warp for any grid shape, with the
                 full time, at its launch's range, whose base comes from the callback
                 data's low bits (eager launches: no load) or through
                 compact_range_lookup's two loads by grid id (graph replays).

  trace_l1_position (cost probe, block_trace) block_trace's leader without its claim:
                 its position from one load L1 serves plus its block's x index (the
                 path per-grid record ranges would take; records never drained, exits
                 stamp them where the slot says), with the shipped entry's 1 register
                 save. What the claim's round trip costs block_trace on graph replays,
                 where issue 16 asks 1.10x block_trace_noop.

    python benchmarks/patch_variants.py store_only /tmp/store_only.cu
    python benchmarks/patch_ab.py --mode block_starts --variant base=device_patches/gpuobs_patches.cu \\
        --variant store_only=/tmp/store_only.cu

Fails, saying which piece, when the shipped code no longer has what a variant replaces.
"""

import argparse
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "device_patches" / "gpuobs_patches.cu"

# Pieces: (function, shipped code, the variant's code).
STARTS_BLOCK_AT_COMPUTED_POSITION = (
    "block_starts_enter",
    "        const uint32_t i = claim_low(&control(userdata)->stripes[stripe], &control(userdata)->limits[stripe], "
    "&dropped);",
    """        // Probe: the block's position computed, no atomic round trip.
        const uint32_t i = (uint32_t)flat_block_index();
        dropped = false;""",
)
STARTS_WARP_AT_COMPUTED_POSITION = (
    "block_starts_enter",
    """    const uint32_t i =
        claim_low(&control(userdata)->warp_stripes[stripe], &control(userdata)->warp_limits[stripe], &dropped);""",
    """    // Probe: the warp's position computed from its block and warp index.
    const uint32_t i = (uint32_t)(flat_block_index() * ((threads_per_block() + 31) / 32) + flat_thread_index() / 32);
    dropped = false;""",
)
SLOT_READ_AT_CTA_SCOPE = (
    "ld_slot",
    'asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"',
    'asm volatile("ld.relaxed.cta.global.v2.u64 {%0, %1}, [%2];"',
)
SLOT_PREFETCHED_TO_L1 = (
    "block_trace_enter",
    """    publish_block(userdata, index);
""",
    """    publish_block(userdata, index);
    // Variant: the line brought into this SM's L1 for the exits (no register waits on it).
    asm volatile("prefetch.global.L1 [%0];" ::"l"(block_slot(userdata, grid_id_here(), flat_block_index()))
                 : "memory");
""",
)

STARTS_ENTRY_EMPTY = (
    "block_starts_enter",
    """    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    // A duty cycle's off time first""",
    """    // Probe: the floor, nothing recorded. Always returns (null callback data included,
    // which the body below would fault on); opaque() keeps the body compiled.
    if (userdata == nullptr || opaque((uint64_t)userdata) != 0) return SANITIZER_PATCH_SUCCESS;
    // A duty cycle's off time first""",
)
TRACE_EXIT_EMPTY = (
    "block_trace_exit",
    """    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    const uint32_t mask = __activemask();""",
    """    // Probe: the exit does nothing, null callback data included.
    if (userdata == nullptr || opaque((uint64_t)userdata) != 0) return SANITIZER_PATCH_SUCCESS;
    const uint32_t mask = __activemask();""",
)
EXIT_STAMPS_ITS_SLOT = (
    "block_trace_exit",
    """    uint64_t key, index;
    ld_slot(block_slot(userdata, grid, block), &key, &index);
    if (key != block_key(grid, block)) {
        red_add(&control(userdata)->unmatched_exit_threads, __popc(mask));
        return SANITIZER_PATCH_SUCCESS;
    }
    if (index == ~0ULL) return SANITIZER_PATCH_SUCCESS;  // the block's event was dropped
    gpuobs_event* r = event_at(userdata, index);
    red_max(&r->time_end, globaltimer());
    red_add32(reinterpret_cast<uint32_t*>(&r->flags), (uint32_t)__popc(mask) << 16);  // exit_count""",
    """    // Probe: stamps into the block's slot, nothing loaded.
    uint64_t* s = reinterpret_cast<uint64_t*>(block_slot(userdata, grid, block));
    red_max(s, globaltimer());
    red_add(s + 1, (uint64_t)__popc(mask));""",
)

ARRIVAL_LOADS_BEFORE_CLAIM = (
    "block_starts_enter",
    """    const uint32_t t0 = globaltimer_lo();
    const uint32_t stripe = stripe_of(sm_id(), GPUOBS_ENTRY_U32(userdata, stripe_count));
    bool dropped;
    const uint32_t i =
        claim_low(&control(userdata)->warp_stripes[stripe], &control(userdata)->warp_limits[stripe], &dropped);
    userdata = (void*)opaque((uint64_t)userdata);
    if (dropped) {
        red_add(&control(userdata)->warp_stripes[stripe].dropped, 1);
        return SANITIZER_PATCH_SUCCESS;
    }
    const uint32_t capacity = GPUOBS_ENTRY_U32(userdata, stripe_capacity);
    const uint32_t arrivals = capacity * GPUOBS_WARP_ARRIVALS_PER_EVENT;  // a power of two, as capacity
    gpuobs_warp_arrival* first = reinterpret_cast<gpuobs_warp_arrival*>(
        event_at(userdata, (uint64_t)GPUOBS_ENTRY_U32(userdata, stripe_count) * capacity));""",
    """    // Candidate: the entry's constants loaded before the claim, not after it.
    const uint32_t t0 = globaltimer_lo();
    const uint32_t stripes = GPUOBS_ENTRY_U32(userdata, stripe_count);
    const uint32_t capacity = GPUOBS_ENTRY_U32(userdata, stripe_capacity);
    const uint32_t stripe = stripe_of(sm_id(), stripes);
    bool dropped;
    const uint32_t i =
        claim_low(&control(userdata)->warp_stripes[stripe], &control(userdata)->warp_limits[stripe], &dropped);
    userdata = (void*)opaque((uint64_t)userdata);
    if (dropped) {
        red_add(&control(userdata)->warp_stripes[stripe].dropped, 1);
        return SANITIZER_PATCH_SUCCESS;
    }
    const uint32_t arrivals = capacity * GPUOBS_WARP_ARRIVALS_PER_EVENT;  // a power of two, as capacity
    gpuobs_warp_arrival* first =
        reinterpret_cast<gpuobs_warp_arrival*>(event_at(userdata, (uint64_t)stripes * capacity));""",
)

# The probes of a 16-byte record per warp: {position} and {ring} say where it goes,
# {constants} where the ring's size comes from (an event is 4 such records).
_ENTRY_CONSTANTS = """        const uint32_t capacity = GPUOBS_ENTRY_U32(userdata, stripe_capacity);
        const uint32_t stripe = stripe_of(sm_id(), GPUOBS_ENTRY_U32(userdata, stripe_count));"""
_SLOT_RING = """        // The stripe split among its SM's 64 slots (capacity >= 16, as patch_ab's runs have).
        const uint32_t per_slot = capacity * 4 / 64;
        uint4* at = reinterpret_cast<uint4*>(event_at(userdata, (uint64_t)stripe * capacity)) +
                    (warp_slot() & 63) * per_slot + (c & (per_slot - 1));"""
_STRIPE_RING = """        uint4* at =
            reinterpret_cast<uint4*>(event_at(userdata, (uint64_t)stripe * capacity)) + (c & (capacity * 4 - 1));"""
_COMPUTED_POSITION = """        const uint32_t c =
            (uint32_t)(flat_block_index() * ((threads_per_block() + 31) / 32) + flat_thread_index() / 32);"""
_COMPACT_RECORD = """    // Probe: one 16-byte record per warp, the leader's too, and no block event.
    if (lane_id() != (uint32_t)(__ffs(__activemask()) - 1)) return SANITIZER_PATCH_SUCCESS;
    {{
        const uint32_t t0 = globaltimer_lo();
{position}
{constants}
{ring}
        const uint64_t t = globaltimer_at(t0);
        st_v4(at, (uint32_t)t, ((uint32_t)(t >> 32) & 0xffff) | ((uint32_t)grid_id_here() << 16),
              (uint32_t)flat_block_index(), sm_id() | ((warp_slot() & 0xff) << 8) | (1u << 24));
    }}
    return SANITIZER_PATCH_SUCCESS;
"""


def _compact_probe(
    position: str, ring: str = _STRIPE_RING, constants: str = _ENTRY_CONSTANTS, edits: tuple = ()
) -> tuple:
    """A piece that makes block_starts' entry write one 16-byte record per warp and
    return before the shipped code (left in place, never reached). `edits` are
    (old, new) replacements in the record's code, each of which must match once."""
    record = _COMPACT_RECORD.format(position=position, constants=constants, ring=ring)
    for old, new in edits:
        if record.count(old) != 1:
            raise SystemExit(f"{Path(__file__).name}: the compact record no longer has {old!r} once")
        record = record.replace(old, new)
    return _starts_entry_probe(record)


def _starts_entry_probe(record: str) -> tuple:
    """A piece that runs `record` at the top of block_starts' entry, after its null check;
    the shipped code stays in place after it, never reached when `record` returns."""
    anchor = "    if ((threadIdx.x"
    return ("block_starts_enter", anchor, record + anchor)


STARTS_SLOT_RING_COMPACT = _compact_probe(
    position="""        // The slot's counter: only its occupant touches it, so a plain load and store.
        uint32_t* count = reinterpret_cast<uint32_t*>(arena(userdata) + GPUOBS_ARENA_BLOCK_TABLE) +
                          ((sm_id() & 255) * 64 + (warp_slot() & 63));
        uint32_t c;
        asm volatile("ld.global.ca.u32 %0, [%1];" : "=r"(c) : "l"(count) : "memory");
        asm volatile("st.global.u32 [%0], %1;" ::"l"(count), "r"(c + 1) : "memory");""",
    ring=_SLOT_RING,
)
STARTS_COMPUTED_COMPACT = _compact_probe(position=_COMPUTED_POSITION)
STARTS_SLOT_ATOMIC_COMPACT = _compact_probe(
    position="""        // An atomic on the slot's own counter, 32 bytes from the next: a round trip, no contention.
        uint32_t* count = reinterpret_cast<uint32_t*>(arena(userdata) + GPUOBS_ARENA_BLOCK_TABLE) +
                          ((sm_id() & 255) * 64 + (warp_slot() & 63)) * 8;
        uint32_t c;
        asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(c) : "l"(count) : "memory");""",
    ring=_SLOT_RING,
)
# A grid's range base found through two dependent loads that L1 may serve: the grid's
# entry (by grid id) and the word it points to (its replay's base).
_BASE_FROM_GRID_LOOKUP = """        const uint64_t* grids =
            reinterpret_cast<const uint64_t*>(arena(userdata) + GPUOBS_ARENA_BLOCK_TABLE);
        uint64_t e;
        asm volatile("ld.global.ca.u64 %0, [%1];" : "=l"(e) : "l"(grids + (grid_id_here() & 1023)) : "memory");
        uint32_t base;
        asm volatile("ld.global.ca.u32 %0, [%1];"
                     : "=r"(base)
                     : "l"(reinterpret_cast<const uint32_t*>(grids + 1024) + (e & 1023))
                     : "memory");"""
STARTS_RANGE_LOOKUP_COMPACT = _compact_probe(
    position=_BASE_FROM_GRID_LOOKUP
    + """
        const uint32_t c = base + (uint32_t)(flat_block_index() * ((threads_per_block() + 31) / 32) +
                                             flat_thread_index() / 32);""",
)
STARTS_COMPUTED_COMPACT_NO_LOADS = _compact_probe(
    position=_COMPUTED_POSITION,
    constants="""        // Constants, not the entry's loads: in bounds only where every stripe holds at least
        // 4,096 records (patch_ab's default --capacity 2^24 gives 65,536 on the H200's 132).
        const uint32_t capacity = 4096;
        const uint32_t stripe = stripe_of(sm_id(), 132);""",
)
# Splits of compact_store_only's cost over the empty entry: the timer, the store, the
# per-warp multiplicity.
_TIMER_READS = (
    ("const uint32_t t0 = globaltimer_lo();", "const uint32_t t0 = 0;"),
    ("const uint64_t t = globaltimer_at(t0);", "const uint64_t t = t0 + (uint64_t)c;"),
)
STARTS_COMPACT_NO_TIMER = _compact_probe(position=_COMPUTED_POSITION, edits=_TIMER_READS)
STARTS_COMPACT_CLOCK = _compact_probe(
    position=_COMPUTED_POSITION,
    edits=(
        ("const uint32_t t0 = globaltimer_lo();", "const uint32_t t0 = (uint32_t)clock64();"),
        ("const uint64_t t = globaltimer_at(t0);", "const uint64_t t = clock64() + t0;"),
    ),
)
STARTS_COMPACT_NO_STORE = _compact_probe(
    position=_COMPUTED_POSITION,
    # The timer never reads 0, so the store is compiled in and never issued.
    edits=(("        st_v4(at,", "        if (t == 0) st_v4(at,"),),
)
STARTS_COMPACT_LEADER_ONLY = _compact_probe(
    position=_COMPUTED_POSITION,
    edits=(
        (
            "if (lane_id() != (uint32_t)(__ffs(__activemask()) - 1)) return SANITIZER_PATCH_SUCCESS;",
            "if (flat_thread_index() != 0) return SANITIZER_PATCH_SUCCESS;",
        ),
    ),
)
# The fewest instructions a per-warp record can take: lane 0 (every lane is active at
# block entry), the 1-D block and warp index, the timer's low half, SM and slot, one
# 16-byte store at a position computed from them. Stays inside the first 128 stripes'
# first 16,384 records (patch_ab's --capacity 2^24 gives 65,536 a stripe on 132 SMs).
_MINIMAL_RECORD = """    // Probe: the cheapest per-warp record.
    {{
        uint32_t lane;
        asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
        if (lane != 0) return SANITIZER_PATCH_SUCCESS;
        const uint32_t t = globaltimer_lo();
        const uint32_t s = sm_id();
        const uint32_t where = (blockIdx.x * 8 + threadIdx.x / 32) & 65535;
        uint4* at = reinterpret_cast<uint4*>(event_at(userdata, (uint64_t)(s & 127) * 65536)) + where;
        {store}
    }}
    return SANITIZER_PATCH_SUCCESS;
"""
STARTS_MINIMAL_WARP = _starts_entry_probe(
    _MINIMAL_RECORD.format(store="st_v4(at, t, blockIdx.x, threadIdx.x, s | (warp_slot() << 8));")
)
STARTS_MINIMAL_WARP_NO_STORE = _starts_entry_probe(
    _MINIMAL_RECORD.format(store="if (t == 1) st_v4(at, t, blockIdx.x, threadIdx.x, s | (warp_slot() << 8));")
)
# What a shippable cheap per-warp record would run: minimal_warp plus any grid shape
# (3-D block and warp index), the full 48-bit time, and its launch's range base either
# from the callback data's low bits (eager launches, no load) or through the two
# dependent loads of compact_range_lookup (graph replays). Same bounds as minimal_warp.
_RANGE_WARP_RECORD = """    // Probe: a per-warp record at its launch's range, no atomic.
    {{
        uint32_t lane;
        asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
        if (lane != 0) return SANITIZER_PATCH_SUCCESS;
        const uint64_t t = globaltimer();
        const uint32_t s = sm_id();
{base}
        const uint32_t where = (base + (uint32_t)flat_block_index() * ((threads_per_block() + 31) / 32) +
                                flat_thread_index() / 32) & 65535;
        uint4* at = reinterpret_cast<uint4*>(event_at(userdata, (uint64_t)(s & 127) * 65536)) + where;
        st_v4(at, (uint32_t)t, (uint32_t)(t >> 32), (uint32_t)flat_block_index(), s | (warp_slot() << 8));
    }}
    return SANITIZER_PATCH_SUCCESS;
"""
_BASE_FROM_CALLBACK_DATA = "        const uint32_t base = (uint32_t)((uint64_t)userdata & 0xffff);"
STARTS_RANGE_WARP_EAGER = _starts_entry_probe(_RANGE_WARP_RECORD.format(base=_BASE_FROM_CALLBACK_DATA))
STARTS_RANGE_WARP_GRAPH = _starts_entry_probe(_RANGE_WARP_RECORD.format(base=_BASE_FROM_GRID_LOOKUP))

TRACE_BLOCK_AT_L1_POSITION = (
    "block_trace_enter",
    "    const uint32_t i = claim_low(&control(userdata)->stripes[stripe], &control(userdata)->limits[stripe], "
    "&dropped);",
    """    // Probe: the position from one load the SM's L1 serves (the stripe's limit, which
    // moves only at drains) plus the block's x index: no atomic. Both shapes without a
    // load gave the entry 3 register saves where this one keeps the shipped 1.
    uint32_t i;
    asm volatile("ld.global.ca.u32 %0, [%1];" : "=r"(i) : "l"(&control(userdata)->limits[stripe]) : "memory");
    i += blockIdx.x;
    dropped = false;""",
)

VARIANTS = {
    "store_only": [STARTS_BLOCK_AT_COMPUTED_POSITION, STARTS_WARP_AT_COMPUTED_POSITION],
    "exit_cta_scope": [SLOT_READ_AT_CTA_SCOPE],
    "exit_cta_scope_prefetch": [SLOT_READ_AT_CTA_SCOPE, SLOT_PREFETCHED_TO_L1],
    "starts_empty": [STARTS_ENTRY_EMPTY],
    "trace_exit_empty": [TRACE_EXIT_EMPTY],
    "exit_no_load": [EXIT_STAMPS_ITS_SLOT],
    "arrival_loads_first": [ARRIVAL_LOADS_BEFORE_CLAIM],
    "slot_rings_compact": [STARTS_SLOT_RING_COMPACT],
    "compact_store_only": [STARTS_COMPUTED_COMPACT],
    "compact_slot_atomics": [STARTS_SLOT_ATOMIC_COMPACT],
    "compact_range_lookup": [STARTS_RANGE_LOOKUP_COMPACT],
    "compact_no_loads": [STARTS_COMPUTED_COMPACT_NO_LOADS],
    "trace_l1_position": [TRACE_BLOCK_AT_L1_POSITION],
    "compact_no_timer": [STARTS_COMPACT_NO_TIMER],
    "compact_clock": [STARTS_COMPACT_CLOCK],
    "compact_no_store": [STARTS_COMPACT_NO_STORE],
    "compact_leader_only": [STARTS_COMPACT_LEADER_ONLY],
    "minimal_warp": [STARTS_MINIMAL_WARP],
    "minimal_warp_no_store": [STARTS_MINIMAL_WARP_NO_STORE],
    "range_warp_eager": [STARTS_RANGE_WARP_EAGER],
    "range_warp_graph": [STARTS_RANGE_WARP_GRAPH],
}


def function_span(source: str, name: str) -> tuple:
    """Where the definition of `name` starts and its body's closing brace ends."""
    start = source.index(f" {name}(")
    start = source.rindex("\n", 0, start) + 1
    depth, i = 0, source.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        i += 1
        if depth == 0:
            return start, i


def make_variant(source: str, variant: str) -> str:
    for n, (function, shipped, changed) in enumerate(VARIANTS[variant], 1):
        start, end = function_span(source, function)
        body = source[start:end]
        if body.count(shipped) != 1:
            raise SystemExit(
                f"{SOURCE}: {function} no longer has piece {n} of variant {variant} "
                f"(first line: {shipped.strip().splitlines()[0]!r}); update {Path(__file__).name}"
            )
        source = source[:start] + body.replace(shipped, changed) + source[end:]
    return source


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", choices=sorted(VARIANTS))
    p.add_argument("out", type=Path, help="where to write the variant's .cu")
    args = p.parse_args(argv)
    args.out.write_text(make_variant(SOURCE.read_text(), args.variant))
    print(f"wrote {args.out} ({args.variant})")


if __name__ == "__main__":
    sys.exit(main())
