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
                 costs with no record written (its register saves and checks, not
                 block_noop's cost: 1.09-1.34x no tool against 1.00-1.03x, measured),
                 inside the same A/B as the candidates.
  trace_exit_empty (split, block_trace) The exit patch returns at once, the entry
                 records as shipped: how much of block_trace over block_trace_noop is
                 the exit's slot read and stamps, how much the entry's claim and stores.
  trace_entry_fewer_saves (candidate, block_trace) The entry as shipped, written so
                 that fewer values live across the claim: 3 register saves in every
                 thread instead of 4 (sm_90, `patch_sass.py`), the slot still published
                 inline (as a call it came later and cost more, measured).
  exit_no_load   (cost probe, block_trace) The exit stamps its block's slot with two
                 fire-and-forget atomics at an address it computes, and loads nothing:
                 the exit of the "exit that never loads" design (device_patches/README.md).
                 Its records lose their ends (the stamps land in the slot, over its key):
                 it measures the exit's cost, nothing else.

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
    "record_block_start",
    """    uint64_t index;
    gpuobs_event* r = claim(userdata, sm, &index);
    if (r == nullptr) return SANITIZER_PATCH_SUCCESS;""",
    """    // Probe: the block's position computed, no atomic round trip.
    const uint32_t stripes = GPUOBS_ENTRY_U32(userdata, stripe_count);
    const uint64_t capacity = GPUOBS_ENTRY_U64(userdata, stripe_capacity);
    gpuobs_event* r = event_at(userdata, (uint64_t)stripe_of(sm, stripes) * capacity +
                                             (flat_block_index() & (capacity - 1)));""",
)
STARTS_WARP_AT_COMPUTED_POSITION = (
    "record_warp_arrival",
    """    const uint64_t limit = ld_limit(&ctl->warp_limits[stripe]);
    const uint64_t i = atom_add(&ctl->warp_stripes[stripe].claimed, 1);
    const uint64_t arrivals = capacity * GPUOBS_WARP_ARRIVALS_PER_EVENT;  // a power of two, as capacity
    if (i >= limit) {
        red_add(&ctl->warp_stripes[stripe].dropped, 1);
        return SANITIZER_PATCH_SUCCESS;
    }""",
    """    // Probe: the warp's position computed from its block and warp index.
    (void)ctl;
    const uint64_t i = flat_block_index() * ((threads_per_block() + 31) / 32) + flat_thread_index() / 32;
    const uint64_t arrivals = capacity * GPUOBS_WARP_ARRIVALS_PER_EVENT;  // a power of two, as capacity""",
)
SLOT_READ_AT_CTA_SCOPE = (
    "ld_slot",
    'asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"',
    'asm volatile("ld.relaxed.cta.global.v2.u64 {%0, %1}, [%2];"',
)
SLOT_PREFETCHED_TO_L1 = (
    "gpuobs_block_trace_enter",
    """    st_slot(block_slot(userdata, grid, block), block_key(grid, block), index);""",
    """    gpuobs_block_slot* s = block_slot(userdata, grid, block);
    st_slot(s, block_key(grid, block), index);
    // Variant: the line brought into this SM's L1 for the exits (no register waits on it).
    asm volatile("prefetch.global.L1 [%0];" ::"l"(s) : "memory");""",
)
STARTS_ENTRY_EMPTY = (
    "gpuobs_block_starts_enter",
    """    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    if ((threadIdx.x""",
    """    if (userdata != nullptr) return SANITIZER_PATCH_SUCCESS;  // Probe: the floor, nothing recorded
    if ((threadIdx.x""",
)
TRACE_EXIT_EMPTY = (
    "gpuobs_block_trace_exit",
    """    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    const uint32_t mask = __activemask();""",
    """    if (userdata != nullptr) return SANITIZER_PATCH_SUCCESS;  // Probe: the exit does nothing
    const uint32_t mask = __activemask();""",
)
EXIT_STAMPS_ITS_SLOT = (
    "gpuobs_block_trace_exit",
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

TRACE_ENTRY_FEWER_SAVES = (
    "gpuobs_block_trace_enter",
    """    const uint64_t t0 = globaltimer();
    const uint32_t sm = sm_id();
    const uint64_t grid = grid_id();
    count_for_launch(userdata, grid, sm, 1);
    uint64_t index;
    gpuobs_event* r = claim(userdata, sm, &index);
    if (r != nullptr) {
        uint32_t* w = reinterpret_cast<uint32_t*>(r);
        st_u64(w, t0);                                               // time_start; time_end stays 0
        st_v4(w + 4, (uint32_t)grid, (uint32_t)(grid >> 32), 0, 0);  // grid_id, address
        // pc: where the block entered, inside its own function's code. A grid
        // launched from the device gets its launcher's callback data (seen on the
        // H200), so its function is found from this pc on the host.
        st_v4(w + 8, (uint32_t)pc, (uint32_t)(pc >> 32), GPUOBS_ENTRY_U32(userdata, function_slot), blockIdx.x);
        st_v2(w + 12, pack_by_bz(), threads_per_block() | (sm << 16));
        st_u32(w + 14, sm | ((uint32_t)GPUOBS_EVENT_BLOCK << 16));  // sm_id_end, kind; flags word untouched
    }
    const uint64_t block = flat_block_index();
    st_slot(block_slot(userdata, grid, block), block_key(grid, block), index);""",
    """    // Candidate: fewer values live across the claim (4 saves -> 3 on sm_90): the
    // arena's base and the entry made in inline PTX at each use, the start's low
    // half kept, no 128-bit stores (their register quads force copies).
    auto arena_now = [userdata]() {
        uint64_t a;
        asm volatile("and.b64 %0, %1, %2;" : "=l"(a) : "l"((uint64_t)userdata), "l"(~(GPUOBS_ARENA_ALIGN - 1)));
        return reinterpret_cast<char*>(a);
    };
    auto entry_now = [userdata]() {
        uint64_t a;
        asm volatile("and.b64 %0, %1, %2;"
                     : "=l"(a)
                     : "l"((uint64_t)userdata), "l"(~(uint64_t)(sizeof(gpuobs_function_entry) - 1)));
        return reinterpret_cast<const gpuobs_function_entry*>(a);
    };
    auto control_now = [&]() { return reinterpret_cast<gpuobs_control*>(arena_now() + GPUOBS_ARENA_CONTROL); };
    uint32_t t0_lo;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t0_lo));
    const uint32_t counter_stripe = sm_id() % (GPUOBS_LAUNCH_COUNTER_STRIPES + 1);
    red_add(reinterpret_cast<uint64_t*>(arena_now() + GPUOBS_ARENA_COUNTERS) +
                gpuobs_launch_counter_index(gpuobs_launch_slot(grid_id()), counter_stripe),
            1);
    const uint32_t stripe = stripe_of(sm_id(), __ldg(&entry_now()->stripe_count));
    const uint64_t limit = ld_limit(&control_now()->limits[stripe]);
    const uint64_t i = atom_add(&control_now()->stripes[stripe].claimed, 1);
    uint64_t index = ~0ULL;
    if (i < limit) {
        const uint64_t capacity = __ldg((const unsigned long long*)&entry_now()->stripe_capacity);
        index = (uint64_t)stripe * capacity + (i & (capacity - 1));
        gpuobs_event* r = reinterpret_cast<gpuobs_event*>(arena_now() + GPUOBS_ARENA_EVENTS) + index;
        uint32_t* w = reinterpret_cast<uint32_t*>(r);
        const uint64_t now = globaltimer();  // the start's high half: now's, less one if the low half wrapped since
        st_u64(w, (now & 0xffffffff00000000ull) - ((uint32_t)now < t0_lo ? 0x100000000ull : 0) + t0_lo);
        st_u64(w + 8, pc);
        const uint64_t grid = grid_id();
        st_v2(w + 4, (uint32_t)grid, (uint32_t)(grid >> 32));  // grid_id
        st_v2(w + 6, 0, 0);                                      // address
        st_v2(w + 10, __ldg(&entry_now()->function_slot), blockIdx.x);
        st_v2(w + 12, pack_by_bz(), threads_per_block() | (sm_id() << 16));
        st_u32(w + 14, sm_id() | ((uint32_t)GPUOBS_EVENT_BLOCK << 16));  // sm_id_end, kind; flags word untouched
    } else {
        red_add(&control_now()->stripes[stripe].dropped, 1);
    }
    const uint64_t grid = grid_id();
    const uint64_t block = flat_block_index();
    st_slot(reinterpret_cast<gpuobs_block_slot*>(arena_now() + GPUOBS_ARENA_BLOCK_TABLE) +
                gpuobs_block_table_slot(grid, block),
            block_key(grid, block), index);""",
)

VARIANTS = {
    "store_only": [STARTS_BLOCK_AT_COMPUTED_POSITION, STARTS_WARP_AT_COMPUTED_POSITION],
    "exit_cta_scope": [SLOT_READ_AT_CTA_SCOPE],
    "exit_cta_scope_prefetch": [SLOT_READ_AT_CTA_SCOPE, SLOT_PREFETCHED_TO_L1],
    "starts_empty": [STARTS_ENTRY_EMPTY],
    "trace_exit_empty": [TRACE_EXIT_EMPTY],
    "trace_entry_fewer_saves": [TRACE_ENTRY_FEWER_SAVES],
    "exit_no_load": [EXIT_STAMPS_ITS_SLOT],
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
