// gpuobs device patches: the code the sanitizer inserts into every kernel.
//
// Rules for everything here: never allocate, never block, never wait. One atomic
// add both counts an attempt and claims a ring position; past the stripe's limit
// (the host has not drained that far yet) it counts a drop and returns. Everything else is a fire-and-forget RED: the
// only round trips a patch waits for are the claim and, at a block's exit, the read of its slot. Layouts come from
// schemas/gpuobs_schema.h, nowhere else.
//
// Built with: nvcc --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch
// (see gpuobs/record/native_build.py for the architectures).
#include <stddef.h>
#include <stdint.h>
#include <sanitizer_patching.h>

#include "gpuobs_schema.h"

#define GPUOBS_PATCH extern "C" __device__ __noinline__ SanitizerPatchResult

namespace {

__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint32_t sm_id() {
    uint32_t s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

__device__ __forceinline__ uint32_t warp_slot() {
    uint32_t w;
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
    return w;
}

__device__ __forceinline__ uint32_t lane_id() {
    uint32_t l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

__device__ __forceinline__ uint64_t grid_id() {
    uint64_t g;
    asm("mov.u64 %0, %%gridid;" : "=l"(g));
    return g;
}

__device__ __forceinline__ uint32_t flat_thread_index() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ __forceinline__ uint64_t flat_block_index() {
    return blockIdx.x + (uint64_t)gridDim.x * (blockIdx.y + (uint64_t)gridDim.y * blockIdx.z);
}

// Fire-and-forget atomics on global memory. Written out in PTX because a plain
// atomicAdd on a pointer of unknown space compiles (in tools-patch mode) to a
// generic ATOM whose "was it shared memory?" predicate the warp must wait for:
// a full round trip to L2 where a RED costs nothing.
__device__ __forceinline__ void red_add(uint64_t* p, uint64_t v) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void red_add32(uint32_t* p, uint32_t v) {
    asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_max(uint64_t* p, uint64_t v) {
    asm volatile("red.relaxed.gpu.global.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t atom_add(uint64_t* p, uint64_t v) {
    uint64_t old;
    asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
    return old;
}
__device__ __forceinline__ void st_v4(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// Published block slots are read from L2 (another SM may have rewritten the
// line since this SM's L1 saw it).
__device__ __forceinline__ void ld_slot(const gpuobs_block_slot* p, uint64_t* key, uint64_t* index) {
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(*key), "=l"(*index) : "l"(p) : "memory");
}
__device__ __forceinline__ void st_slot(gpuobs_block_slot* p, uint64_t key, uint64_t index) {
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(key), "l"(index) : "memory");
}

// ---- for the block entries, which every thread runs --------------------------
// A patch saves and restores every register it uses past the ABI's scratch ones
// (R0, R3-R15), in every thread, whichever path it takes (device_patches/README.md).
// The block entries record from one thread per block or warp, so their record
// paths are written to fit those registers; these helpers keep ptxas from holding
// values across the claim's round trip, which is where it ran out.

// The same value, opaque to the compiler: derived again where used, not kept live.
__device__ __forceinline__ uint64_t opaque(uint64_t v) {
    asm volatile("mov.b64 %0, %0;" : "+l"(v));
    return v;
}
__device__ __forceinline__ uint32_t globaltimer_lo() {
    uint32_t t;
    asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
    return t;
}
// A time whose low half t0_lo was read earlier: the full timer now, less the
// time since (under 2^32 ns), so only 32 bits stay live across a round trip.
__device__ __forceinline__ uint64_t globaltimer_at(uint32_t t0_lo) {
    const uint64_t t = globaltimer();
    return t - (uint32_t)((uint32_t)t - t0_lo);
}
// %gridid, read where it is used (volatile: not hoisted over the claim).
__device__ __forceinline__ uint64_t grid_id_here() {
    uint64_t g;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
    return g;
}
// One 32-bit store at a time, in program order: wider stores need four aligned
// registers free at once, and the kind word must still land last.
__device__ __forceinline__ void st_word(uint32_t* p, uint32_t a) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(a) : "memory");
}

// The context's arena, from the callback data pointer alone (see the schema).
__device__ __forceinline__ char* arena(const void* userdata) {
    return reinterpret_cast<char*>((uint64_t)userdata & ~(GPUOBS_ARENA_ALIGN - 1));
}

// The duty cycle (the schema's callback data bits), tested by the patches' _duty
// twins only (the tool patches with them where a duty cycle is kept on the device;
// the plain patches pay nothing for it): whether the device's clock `t` is outside
// the on time, or with `grace` 1 outside the on time and one more on length
// (block_trace's exits). (t mod 2^p) >> o as two shifts, from fields the tool
// computed (64 - p, 64 - p + o): no load, no branch. PTX's shr clamps a shift of 64
// (a grace reaching the period's end) to 0: never off. The clock is read first, by
// the caller, so its latency overlaps the fields' extraction (measured on the H100's
// decode loop: block_starts closed by the clock cost block_noop + 0.020 of no tool's
// step time, by the record gate's cached load + 0.062).
template <uint32_t grace = 0>
__device__ __forceinline__ bool duty_off_at(const void* userdata, uint64_t t) {
    const uint64_t bits = (uint64_t)userdata;
    const uint32_t left = (uint32_t)(bits >> GPUOBS_DUTY_LEFT_SHIFT_BIT);
    const uint32_t right = (((uint32_t)(bits >> GPUOBS_DUTY_RIGHT_SHIFT_BIT)) & 63) + grace;
    uint64_t phase;
    asm("shr.b64 %0, %1, %2;" : "=l"(phase) : "l"(t << left), "r"(right));
    return phase != 0;
}
// The callback data without the duty cycle's bits: what every helper below takes (the
// _duty twins strip it once, after their test; the plain patches never see the bits).
__device__ __forceinline__ void* without_duty(const void* userdata) {
    return reinterpret_cast<void*>((uint64_t)userdata & GPUOBS_CALLBACK_ADDRESS_MASK);
}

__device__ __forceinline__ gpuobs_control* control(const void* ud) {
    return reinterpret_cast<gpuobs_control*>(arena(ud) + GPUOBS_ARENA_CONTROL);
}
__device__ __forceinline__ gpuobs_event* event_at(const void* ud, uint64_t index) {
    return reinterpret_cast<gpuobs_event*>(arena(ud) + GPUOBS_ARENA_EVENTS) + index;
}

// The record gate (see the schema): off, the patch returns before it counts or
// records anything. Through the read-only cache: the host changes the gate only
// where none of the context's kernels runs or in stream order, so one launch
// reads one value, and past an SM's first block the read is an L1 hit.
__device__ __forceinline__ bool gate_off(const void* ud) {
    return __ldg(&control(ud)->record_gate) == GPUOBS_RECORD_GATE_OFF;
}

// The sample gate (see the schema): closed, what would be recorded is counted in
// the stripe's sampled_out instead. Read only where a record would be claimed,
// through the same cached line as the record gate. The sampler turns it while
// kernels run: a kernel may go on seeing the value it first read (the cache is
// not coherent), which leaves its counts exact and its records a part of its blocks.
__device__ __forceinline__ bool sampled_out(const void* ud) { return __ldg(&control(ud)->sample_gate) != 0; }

// Both gates in one load, for the paths that test both before anything else (a
// block_starts warp that writes no record): one round trip to L1, not two in turn.
static_assert(offsetof(gpuobs_control, sample_gate) == offsetof(gpuobs_control, record_gate) + 4 &&
                  offsetof(gpuobs_control, record_gate) % 8 == 0,
              "the two gates: one aligned 64-bit word, record gate low");
__device__ __forceinline__ uint64_t both_gates(const void* ud) {
    return __ldg(reinterpret_cast<const unsigned long long*>(&control(ud)->record_gate));
}
__device__ __forceinline__ bool gate_is_off(uint64_t gates) { return (uint32_t)gates == GPUOBS_RECORD_GATE_OFF; }
__device__ __forceinline__ bool samples_out(uint64_t gates) { return (uint32_t)(gates >> 32) != 0; }

// Exact per-launch counting with no loads: a fire-and-forget add into the
// grid's hashed slot, spread over stripes by SM.
__device__ __forceinline__ void count_for_launch(const void* ud, uint64_t grid, uint32_t sm, uint32_t n) {
    uint64_t* table = reinterpret_cast<uint64_t*>(arena(ud) + GPUOBS_ARENA_COUNTERS);
    red_add(table + gpuobs_launch_counter_index(gpuobs_launch_slot(grid), sm % (GPUOBS_LAUNCH_COUNTER_STRIPES + 1)), n);
}

// The callback data pointer is the function's entry plus the sample shift.
__device__ __forceinline__ const char* entry(const void* userdata) {
    return reinterpret_cast<const char*>((uint64_t)userdata & ~(uint64_t)(sizeof(gpuobs_function_entry) - 1));
}
__device__ __forceinline__ uint32_t sample_shift(const void* userdata) {
    return (uint32_t)(uint64_t)userdata & (uint32_t)(sizeof(gpuobs_function_entry) - 1);
}
__device__ __forceinline__ uint64_t entry_u64(const void* userdata, uint32_t offset) {
    return __ldg(reinterpret_cast<const unsigned long long*>(entry(userdata) + offset));
}
__device__ __forceinline__ uint32_t entry_u32(const void* userdata, uint32_t offset) {
    return __ldg(reinterpret_cast<const unsigned int*>(entry(userdata) + offset));
}
#define GPUOBS_ENTRY_U64(ud, field) entry_u64(ud, offsetof(gpuobs_function_entry, field))
#define GPUOBS_ENTRY_U32(ud, field) entry_u32(ud, offsetof(gpuobs_function_entry, field))

// Records are stored a 32-bit word at a time (st_word, st_v4): each word named by
// the schema field it starts with (in gpuobs_event, or gpuobs_warp_arrival), +1 for
// a 64-bit field's high half. The asserts hold every word these patches write to
// the layout, so a change in the schema that moves one fails to compile here.
#define EVENT_WORD(field) (offsetof(gpuobs_event, field) / 4)
#define ARRIVAL_WORD(field) (offsetof(gpuobs_warp_arrival, field) / 4)
static_assert(sizeof(gpuobs_event) == 64 && offsetof(gpuobs_event, time_start) == 0, "event: 16 words");
static_assert(offsetof(gpuobs_event, time_end) == 8 && offsetof(gpuobs_event, grid_id) == 16 &&
                  offsetof(gpuobs_event, address) == 24 && offsetof(gpuobs_event, pc) == 32,
              "event: the 64-bit fields, two words each, in the order st_v4 writes them");
static_assert(offsetof(gpuobs_event, function_slot) == 40 && offsetof(gpuobs_event, block_x) == 44,
              "event: st_v4 at EVENT_WORD(pc) writes pc, function_slot, block_x");
static_assert(offsetof(gpuobs_event, block_y) == 48 && offsetof(gpuobs_event, block_z) == 50,
              "event: one word holds block_y, block_z (pack_by_bz)");
static_assert(offsetof(gpuobs_event, thread_index) == 52 && offsetof(gpuobs_event, sm_id) == 54,
              "event: one word holds thread_index, sm_id");
static_assert(offsetof(gpuobs_event, sm_id_end) == 56 && offsetof(gpuobs_event, kind) == 58 &&
                  offsetof(gpuobs_event, access_size) == 59,
              "event: one word holds sm_id_end, kind, access_size: the last one written");
static_assert(offsetof(gpuobs_event, flags) == 60 && offsetof(gpuobs_event, exit_count) == 62,
              "event: one word holds flags, exit_count (the exits add to its high half)");
static_assert(sizeof(gpuobs_warp_arrival) == 32 && offsetof(gpuobs_warp_arrival, grid_id) == 0 &&
                  offsetof(gpuobs_warp_arrival, time) == 8 && offsetof(gpuobs_warp_arrival, block_x) == 16 &&
                  offsetof(gpuobs_warp_arrival, block_y) == 20 && offsetof(gpuobs_warp_arrival, block_z) == 22,
              "warp arrival: grid, time, block_x, block_y and block_z in one word");
static_assert(offsetof(gpuobs_warp_arrival, sm_id) == 24 && offsetof(gpuobs_warp_arrival, warp_slot) == 26 &&
                  offsetof(gpuobs_warp_arrival, kind) == 27 && offsetof(gpuobs_warp_arrival, reserved) == 28,
              "warp arrival: one word holds sm_id, warp_slot, kind: the last one written");

// An SM's own stripe; SM ids past the stripe count (ids can have gaps) wrap.
// A subtraction loop, not %: the division took 20 more instructions. With 0
// stripes (an unwritten entry) it must not spin; a claim through such an entry
// would not drop but write outside its stripe, so setup writes every function
// entry before any module is patched (context_setup.cpp): none is read unwritten.
__device__ __forceinline__ uint32_t stripe_of(uint32_t sm, uint32_t stripes) {
    uint32_t stripe = sm;
    while (stripe >= stripes && stripes != 0) stripe -= stripes;
    return stripe;
}

// A block (or access) sampled out, counted on its SM's line of the control block
// (the host sums every line: no load of the stripe count, no register for it).
__device__ __forceinline__ void count_sampled_out(const void* ud) {
    red_add(&control(ud)->stripes[sm_id() & (GPUOBS_MAX_STRIPES - 1)].sampled_out, 1);
}

// The stripe's limit, read from L2 (the host raises it while kernels run). Issued
// before the claim's atomic and used after it, so the two round trips overlap.
__device__ __forceinline__ uint64_t ld_limit(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// One atomic add counts the attempt and claims a ring position; a position at or
// past the stripe's limit (the ring is full until the host drains it) counts a drop.
__device__ __forceinline__ gpuobs_event* claim(const void* ud, uint32_t sm, uint64_t* index_out) {
    gpuobs_control* ctl = control(ud);
    const uint32_t stripes = GPUOBS_ENTRY_U32(ud, stripe_count);
    const uint64_t capacity = GPUOBS_ENTRY_U64(ud, stripe_capacity);  // a power of two
    const uint32_t stripe = stripe_of(sm, stripes);
    const uint64_t limit = ld_limit(&ctl->limits[stripe]);
    const uint64_t i = atom_add(&ctl->stripes[stripe].claimed, 1);
    if (i >= limit) {
        red_add(&ctl->stripes[stripe].dropped, 1);
        *index_out = ~0ULL;
        return nullptr;
    }
    const uint64_t index = (uint64_t)stripe * capacity + (i & (capacity - 1));
    *index_out = index;
    return event_at(ud, index);
}

// The block entries' claim, on the low halves of the stripe's counter and limit
// (little-endian: the first word of each), so it keeps 2 registers where claim()
// keeps 4. Positions are compared modulo 2^32: the host widens the counter from
// what it has drained (read_claims), which holds while fewer than 2^31 claims
// past the limit go undrained on one stripe (each one a block dropped).
__device__ __forceinline__ uint32_t claim_low(gpuobs_stripe* stripe, const uint64_t* limit, bool* dropped) {
    uint32_t l, i;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(l) : "l"(limit) : "memory");
    asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(i) : "l"(&stripe->claimed) : "memory");
    *dropped = (int32_t)(i - l) >= 0;
    return i;
}

__device__ __forceinline__ uint32_t pack_by_bz() { return (blockIdx.y & 0xffff) | ((blockIdx.z & 0xffff) << 16); }

// What tells a slot's blocks apart: the block index's low 32 bits over the grid
// id's low 31. Blocks of one grid share a slot only 2^18 blocks apart
// (gpuobs_block_table_slot), so equal keys in one grid need blocks 2^32 apart; grids
// share a slot only when their ids agree modulo 64, so equal keys need ids 2^31
// apart. 32-bit arithmetic only: a hash's 64-bit multiplies cost the leader 2 more
// registers. Odd, so that an empty (zero) slot never matches.
__device__ __forceinline__ uint64_t block_key(uint64_t grid, uint64_t block) {
    return ((uint64_t)(uint32_t)block << 32) | ((uint32_t)grid << 1) | 1u;
}

// The slot mapping is the schema's (gpuobs_block_table_slot).
__device__ __forceinline__ gpuobs_block_slot* block_slot(const void* ud, uint64_t grid, uint64_t block) {
    const uint32_t i = gpuobs_block_table_slot(grid, block);
    return reinterpret_cast<gpuobs_block_slot*>(arena(ud) + GPUOBS_ARENA_BLOCK_TABLE) + i;
}

__device__ __forceinline__ uint32_t threads_per_block() { return blockDim.x * blockDim.y * blockDim.z; }

// The block's slot, keyed, pointing at its event (~0: the event was dropped).
__device__ __forceinline__ void publish_block(const void* ud, uint64_t index) {
    const uint64_t grid = grid_id_here(), block = flat_block_index();
    st_slot(block_slot(ud, grid, block), block_key(grid, block), index);
}

}  // namespace

// ---- block rungs ----------------------------------------------------------

GPUOBS_PATCH gpuobs_block_noop(void* userdata, uint64_t pc) { return SANITIZER_PATCH_SUCCESS; }

// Block exit, doing nothing: with gpuobs_block_noop at entry, the block_trace_noop
// rung, the price of the two patch points block_trace uses.
GPUOBS_PATCH gpuobs_block_exit_noop(void* userdata, uint64_t pc) { return SANITIZER_PATCH_SUCCESS; }

GPUOBS_PATCH gpuobs_block_counter(void* userdata, uint64_t pc) {
    if ((threadIdx.x | threadIdx.y | threadIdx.z) != 0 || userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    if (gate_off(userdata)) return SANITIZER_PATCH_SUCCESS;
    count_for_launch(userdata, grid_id(), sm_id(), 1);
    return SANITIZER_PATCH_SUCCESS;
}

// Block start: the leader (thread 0,0,0) claims the block's event, publishes it
// in the block's slot for the block's exits to find, and writes all of it but the
// end and the exit count (zero until exits stamp them). Its path fits the scratch
// registers but for 1 (see the helpers above; 7 with vector stores and a hashed key).
// Its claim is written out again in block_starts' leader on purpose: shared as one
// inline helper, ptxas gave this entry 3 saves instead of 1.
template <bool kDuty>
static __device__ __forceinline__ SanitizerPatchResult block_trace_enter(void* userdata, uint64_t pc) {
    if ((threadIdx.x | threadIdx.y | threadIdx.z) != 0 || userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    if (kDuty) {
        const bool off = duty_off_at(userdata, globaltimer());
        userdata = without_duty(userdata);
        if (off) {
            publish_block(userdata, ~0ULL);  // not counted; so its exits stamp no older block of this key
            return SANITIZER_PATCH_SUCCESS;
        }
    }
    if (gate_off(userdata)) return SANITIZER_PATCH_SUCCESS;
    if (sampled_out(userdata)) {  // counted, not recorded: its exits find no event, as for a drop
        count_sampled_out(userdata);
        count_for_launch(userdata, grid_id_here(), sm_id(), 1);
        publish_block(userdata, ~0ULL);
        return SANITIZER_PATCH_SUCCESS;
    }
    const uint32_t t0 = globaltimer_lo();
    const uint32_t stripe = stripe_of(sm_id(), GPUOBS_ENTRY_U32(userdata, stripe_count));
    bool dropped;
    const uint32_t i = claim_low(&control(userdata)->stripes[stripe], &control(userdata)->limits[stripe], &dropped);
    userdata = (void*)opaque((uint64_t)userdata);
    if (dropped) {
        red_add(&control(userdata)->stripes[stripe].dropped, 1);
        count_for_launch(userdata, grid_id_here(), sm_id(), 1);
        publish_block(userdata, ~0ULL);
        return SANITIZER_PATCH_SUCCESS;
    }
    const uint32_t capacity = GPUOBS_ENTRY_U32(userdata, stripe_capacity);
    const uint64_t index = (uint64_t)stripe * capacity + (i & (capacity - 1));
    uint32_t* w = reinterpret_cast<uint32_t*>(opaque((uint64_t)event_at(userdata, index)));
    // pc: where the block entered, inside its own function's code. A grid
    // launched from the device gets its launcher's callback data (seen on the
    // H200), so its function is found from this pc on the host.
    st_word(w + EVENT_WORD(pc), (uint32_t)pc);
    st_word(w + EVENT_WORD(pc) + 1, (uint32_t)(pc >> 32));
    // Published before the rest is written, so fewer early exits miss it: the
    // exits stamp only the end and the exit count, which the leader leaves as
    // the drain zeroed them.
    publish_block(userdata, index);
    st_word(w + EVENT_WORD(function_slot), GPUOBS_ENTRY_U32(userdata, function_slot));
    count_for_launch(userdata, grid_id_here(), sm_id(), 1);
    st_word(w + EVENT_WORD(block_x), blockIdx.x);
    const uint64_t start = globaltimer_at(t0);
    st_word(w + EVENT_WORD(time_start), (uint32_t)start);
    st_word(w + EVENT_WORD(time_start) + 1, (uint32_t)(start >> 32));
    const uint64_t grid = grid_id_here();
    st_word(w + EVENT_WORD(grid_id), (uint32_t)grid);
    st_word(w + EVENT_WORD(grid_id) + 1, (uint32_t)(grid >> 32));
    st_word(w + EVENT_WORD(address), 0);  // address
    st_word(w + EVENT_WORD(address) + 1, 0);
    st_word(w + EVENT_WORD(block_y), pack_by_bz());
    st_word(w + EVENT_WORD(thread_index), threads_per_block() | (sm_id() << 16));
    st_word(w + EVENT_WORD(sm_id_end), sm_id() | ((uint32_t)GPUOBS_EVENT_BLOCK << 16));  // sm_id_end, kind: last
    return SANITIZER_PATCH_SUCCESS;
}
GPUOBS_PATCH gpuobs_block_trace_enter(void* userdata, uint64_t pc) { return block_trace_enter<false>(userdata, pc); }
GPUOBS_PATCH gpuobs_block_trace_enter_duty(void* userdata, uint64_t pc) {
    return block_trace_enter<true>(userdata, pc);
}

// Block end, defined as the moment the block's last thread passes its exit:
// each group of threads exiting together finds the block's event through its
// slot and stamps it with fire-and-forget atomics: the latest time wins, and the
// group's size adds to the event's exit count. A group that exits before the
// leader has published the slot exits before the leader itself, whose own stamp
// is then the later one; the count (checked against the block's threads at the
// flush) tells whether every exit was seen.
template <bool kDuty>
static __device__ __forceinline__ SanitizerPatchResult block_trace_exit(void* userdata, uint64_t pc) {
    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    const uint32_t mask = __activemask();
    // A duty cycle's exits stamp through one on length past the on time: a block
    // that started inside it ends in the record unless it outlasts that.
    if (lane_id() != (uint32_t)(__ffs(mask) - 1)) return SANITIZER_PATCH_SUCCESS;
    if (kDuty) {
        if (duty_off_at<1>(userdata, globaltimer())) return SANITIZER_PATCH_SUCCESS;
        userdata = without_duty(userdata);
    }
    if (gate_off(userdata)) return SANITIZER_PATCH_SUCCESS;
    const uint64_t grid = grid_id(), block = flat_block_index();
    uint64_t key, index;
    ld_slot(block_slot(userdata, grid, block), &key, &index);
    if (key != block_key(grid, block)) {
        red_add(&control(userdata)->unmatched_exit_threads, __popc(mask));
        return SANITIZER_PATCH_SUCCESS;
    }
    if (index == ~0ULL) return SANITIZER_PATCH_SUCCESS;  // the block's event was dropped
    gpuobs_event* r = event_at(userdata, index);
    red_max(&r->time_end, globaltimer());
    red_add32(reinterpret_cast<uint32_t*>(&r->flags), (uint32_t)__popc(mask) << 16);  // exit_count
    return SANITIZER_PATCH_SUCCESS;
}
GPUOBS_PATCH gpuobs_block_trace_exit(void* userdata, uint64_t pc) { return block_trace_exit<false>(userdata, pc); }
GPUOBS_PATCH gpuobs_block_trace_exit_duty(void* userdata, uint64_t pc) { return block_trace_exit<true>(userdata, pc); }

// Block start without an exit patch. The block's leader (thread 0,0,0) writes
// the block's event as block_trace's entry does, with the hardware warp slot of
// its own warp as the first bit of a slot mask and no end. Every other warp
// writes one arrival (its block, SM and slot) for the host to fold into that
// mask: warps of a block do not take consecutive slots (measured on the H200),
// so the leader cannot name them. A block's end is bounded on the host by the
// next arrivals in its slots. Arrivals live after the events, GPUOBS_WARP_ARRIVALS_PER_EVENT
// per event, in the same stripes.
//
// Every thread of every block runs this, so both records are written to fit the
// ABI's scratch registers (the helpers above): the entry saves none, as
// block_noop. Out of line they cost every thread the call's 3 saves, inline and
// written plainly 5 (measured on the H200: 1.09-1.27x no tool for the call alone).
template <bool kDuty>
static __device__ __forceinline__ SanitizerPatchResult block_starts_enter(void* userdata, uint64_t pc) {
    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    // A duty cycle's off time first, with no load (each warp reads the clock: at
    // an edge a block's leader and its other warps may see different sides).
    if (kDuty) {
        if (duty_off_at(userdata, globaltimer())) return SANITIZER_PATCH_SUCCESS;
        userdata = without_duty(userdata);
    }
    // Both gates next, every thread, one cached load a warp shares: disarmed
    // (outside a window, --paused) a thread leaves here, before the thread- and
    // lane-index reads and the vote that an arrival costs.
    const uint64_t gates = both_gates(userdata);
    if (gate_is_off(gates)) return SANITIZER_PATCH_SUCCESS;
    if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0) {
        if (samples_out(gates)) {  // counted, not recorded; its other warps see the gate too
            count_sampled_out(userdata);
            count_for_launch(userdata, grid_id_here(), sm_id(), 1);
            return SANITIZER_PATCH_SUCCESS;
        }
        const uint32_t t0 = globaltimer_lo();
        const uint32_t stripe = stripe_of(sm_id(), GPUOBS_ENTRY_U32(userdata, stripe_count));
        bool dropped;
        const uint32_t i = claim_low(&control(userdata)->stripes[stripe], &control(userdata)->limits[stripe], &dropped);
        userdata = (void*)opaque((uint64_t)userdata);
        if (dropped) {
            red_add(&control(userdata)->stripes[stripe].dropped, 1);
            count_for_launch(userdata, grid_id_here(), sm_id(), 1);
            return SANITIZER_PATCH_SUCCESS;
        }
        const uint32_t capacity = GPUOBS_ENTRY_U32(userdata, stripe_capacity);
        uint32_t* w = reinterpret_cast<uint32_t*>(
            opaque((uint64_t)event_at(userdata, (uint64_t)stripe * capacity + (i & (capacity - 1)))));
        st_word(w + EVENT_WORD(pc), (uint32_t)pc);
        st_word(w + EVENT_WORD(pc) + 1, (uint32_t)(pc >> 32));
        st_word(w + EVENT_WORD(function_slot), GPUOBS_ENTRY_U32(userdata, function_slot));
        count_for_launch(userdata, grid_id_here(), sm_id(), 1);
        st_word(w + EVENT_WORD(block_x), blockIdx.x);
        const uint64_t start = globaltimer_at(t0);
        st_word(w + EVENT_WORD(time_start), (uint32_t)start);
        st_word(w + EVENT_WORD(time_start) + 1, (uint32_t)(start >> 32));
        st_word(w + EVENT_WORD(time_end), 0);  // time_end: none, bounded on the host
        st_word(w + EVENT_WORD(time_end) + 1, 0);
        const uint32_t slot = warp_slot();
        const uint64_t grid = grid_id_here();
        st_word(w + EVENT_WORD(grid_id), (uint32_t)grid);
        st_word(w + EVENT_WORD(grid_id) + 1, (uint32_t)(grid >> 32));
        st_word(w + EVENT_WORD(address), slot < 32 ? 1u << slot : 0);  // address: the slot mask
        st_word(w + EVENT_WORD(address) + 1, slot >= 32 && slot < 64 ? 1u << (slot - 32) : 0);
        st_word(w + EVENT_WORD(block_y), pack_by_bz());
        st_word(w + EVENT_WORD(thread_index), threads_per_block() | (sm_id() << 16));
        st_word(w + EVENT_WORD(flags), slot < 64 ? 0u : (uint32_t)GPUOBS_BLOCK_SLOTS_INCOMPLETE);  // flags, exit count
        st_word(w + EVENT_WORD(sm_id_end), sm_id() | ((uint32_t)GPUOBS_EVENT_BLOCK << 16));  // sm_id_end, kind: last
        return SANITIZER_PATCH_SUCCESS;
    }
    // One arrival per warp, from its first active thread; warp 0 is the leader's.
    // Sampled out, the leader counted the block, and its other threads leave.
    if (samples_out(gates) || flat_thread_index() < 32 || lane_id() != (uint32_t)(__ffs(__activemask()) - 1))
        return SANITIZER_PATCH_SUCCESS;
    const uint32_t t0 = globaltimer_lo();
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
        event_at(userdata, (uint64_t)GPUOBS_ENTRY_U32(userdata, stripe_count) * capacity));
    uint32_t* w =
        reinterpret_cast<uint32_t*>(opaque((uint64_t)(first + (uint64_t)stripe * arrivals + (i & (arrivals - 1)))));
    const uint64_t grid = grid_id_here();
    st_word(w + ARRIVAL_WORD(grid_id), (uint32_t)grid);
    st_word(w + ARRIVAL_WORD(grid_id) + 1, (uint32_t)(grid >> 32));
    const uint64_t t = globaltimer_at(t0);
    st_word(w + ARRIVAL_WORD(time), (uint32_t)t);
    st_word(w + ARRIVAL_WORD(time) + 1, (uint32_t)(t >> 32));
    st_word(w + ARRIVAL_WORD(block_x), blockIdx.x);
    st_word(w + ARRIVAL_WORD(block_y), pack_by_bz());
    st_word(w + ARRIVAL_WORD(reserved), 0);
    st_word(w + ARRIVAL_WORD(sm_id), sm_id() | ((warp_slot() & 0xff) << 16) | (1u << 24));  // kind: last
    return SANITIZER_PATCH_SUCCESS;
}
GPUOBS_PATCH gpuobs_block_starts_enter(void* userdata, uint64_t pc) { return block_starts_enter<false>(userdata, pc); }
GPUOBS_PATCH gpuobs_block_starts_enter_duty(void* userdata, uint64_t pc) {
    return block_starts_enter<true>(userdata, pc);
}

// ---- memory rungs ---------------------------------------------------------

GPUOBS_PATCH gpuobs_mem_noop(void* userdata, uint64_t pc, void* ptr, uint32_t size, uint32_t flags, const void* data) {
    return SANITIZER_PATCH_SUCCESS;
}

// A cheap 32-bit mix (MurmurHash3's finalizer): the sampling draw runs for
// every thread on every access, so it stays in 32-bit arithmetic.
static __device__ __forceinline__ uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

// The rare path, out of line: a patch saves to the stack, and restores, every
// register its code uses beyond a few scratch ones, on every call, whichever path
// it takes; kept inline, the capture cost every access 7 stores and 7 loads of
// the stack, out of line the patch pays 3 (the call's return address and
// barrier). Ids are read again from special registers, not kept live.
template <bool kDuty>
static __device__ __noinline__ void capture_access(const void* userdata, uint64_t pc, void* ptr, uint32_t size,
                                                   uint32_t flags) {
    // (Read again per lane: within a microsecond of a duty cycle's edge a lane may
    // capture an access its warp's leader did not count, or the reverse.)
    if (kDuty) {
        if (duty_off_at(userdata, globaltimer())) return;
        userdata = without_duty(userdata);
    }
    if (gate_off(userdata)) return;
    if (sampled_out(userdata)) {
        count_sampled_out(userdata);
        return;
    }
    const uint32_t size_flags = ((size & 0xff) << 24) | (flags & 0xffff);
    uint64_t index;
    gpuobs_event* r = claim(userdata, sm_id(), &index);
    if (r == nullptr) return;
    uint32_t* w = reinterpret_cast<uint32_t*>(r);
    st_v4(w + EVENT_WORD(pc), (uint32_t)pc, (uint32_t)(pc >> 32), GPUOBS_ENTRY_U32(userdata, function_slot),
          blockIdx.x);
    const uint64_t grid = grid_id(), address = (uint64_t)ptr;
    st_v4(w + EVENT_WORD(grid_id), (uint32_t)grid, (uint32_t)(grid >> 32), (uint32_t)address,
          (uint32_t)(address >> 32));
    const uint64_t t = globaltimer();
    st_v4(w + EVENT_WORD(time_start), (uint32_t)t, (uint32_t)(t >> 32), 0, 0);
    // kind (byte 58) goes in the last store, so a record reads as complete only when all of it is there.
    const uint32_t sm = sm_id();
    st_v4(w + EVENT_WORD(block_y), pack_by_bz(), (flat_thread_index() & 0xffff) | (sm << 16),
          sm | ((uint32_t)GPUOBS_EVENT_MEMORY << 16) | (size_flags & 0xff000000u), size_flags & 0xffff);
}

// Every access counted exactly (one RED per warp group, spread by SM); the
// access is captured when the hash of (pc, thread, block) has its low
// sample_shift bits zero (shift 0 = mem_full, every access). Nothing before that
// test loads: the shift comes with the callback data pointer.
template <bool kDuty>
static __device__ __forceinline__ SanitizerPatchResult mem_access(void* userdata, uint64_t pc, void* ptr, uint32_t size,
                                                                  uint32_t flags) {
    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    const uint32_t mask = __activemask();
    if (lane_id() == (uint32_t)(__ffs(mask) - 1)) {
        // the other lanes see both in capture_access
        if (kDuty && duty_off_at(userdata, globaltimer())) return SANITIZER_PATCH_SUCCESS;
        // (capture_access tests the cycle again per lane, so the bits stay on userdata)
        const void* ud = kDuty ? without_duty(userdata) : userdata;
        if (gate_off(ud)) return SANITIZER_PATCH_SUCCESS;
        count_for_launch(ud, grid_id(), sm_id(), __popc(mask));
    }
    const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint32_t h = fmix32((uint32_t)pc * 0x9e3779b1u ^ flat_thread_index() * 0x85ebca77u ^ block * 0xc2b2ae3du ^
                              (uint32_t)(pc >> 32));
    if ((h & (uint32_t)((1ULL << sample_shift(userdata)) - 1)) != 0) return SANITIZER_PATCH_SUCCESS;
    capture_access<kDuty>(userdata, pc, ptr, size, flags);
    return SANITIZER_PATCH_SUCCESS;
}
GPUOBS_PATCH gpuobs_mem_access(void* userdata, uint64_t pc, void* ptr, uint32_t size, uint32_t flags,
                               const void* data) {
    return mem_access<false>(userdata, pc, ptr, size, flags);
}
GPUOBS_PATCH gpuobs_mem_access_duty(void* userdata, uint64_t pc, void* ptr, uint32_t size, uint32_t flags,
                                    const void* data) {
    return mem_access<true>(userdata, pc, ptr, size, flags);
}
