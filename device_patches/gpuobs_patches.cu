// gpuobs device patches: the code the sanitizer inserts into every kernel.
//
// Rules for everything here: never allocate, never block, never wait. One atomic
// add both counts an attempt and claims a slot; past capacity it counts a drop
// and returns. Layouts come from schemas/gpuobs_schema.h, nowhere else.
//
// Built with: nvcc --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch
// (see gpuobs/native_build.py for the architectures).
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

__device__ __forceinline__ uint32_t stripe_of(const gpuobs_function_entry& e, uint32_t sm) {
    return sm < e.stripe_count ? sm : sm % e.stripe_count;
}

// The entry is written once by the host before any launch of the function and
// never changes while kernels run: read-only cache.
__device__ __forceinline__ gpuobs_function_entry load_entry(const void* userdata) {
    const uint4* p = static_cast<const uint4*>(userdata);
    uint4 a = __ldg(p), b = __ldg(p + 1), c = __ldg(p + 2);
    gpuobs_function_entry e;
    e.control = ((uint64_t)a.y << 32) | a.x;
    e.events = ((uint64_t)a.w << 32) | a.z;
    e.launch_counters = ((uint64_t)b.y << 32) | b.x;
    e.block_table = ((uint64_t)b.w << 32) | b.z;
    e.stripe_capacity = ((uint64_t)c.y << 32) | c.x;
    e.stripe_count = c.z;
    e.sample_shift = c.w;
    uint2 d = __ldg(reinterpret_cast<const uint2*>(p + 3));
    e.function_slot = d.x;
    e.mode = d.y;
    return e;
}

// Exact per-launch counting with no loads: a fire-and-forget add into the
// grid's hashed slot, spread over stripes by SM.
__device__ __forceinline__ void count_for_launch(const gpuobs_function_entry& e, uint64_t grid,
                                                 uint32_t sm, uint32_t n) {
    gpuobs_launch_counter* table = reinterpret_cast<gpuobs_launch_counter*>(e.launch_counters);
    uint32_t slot = gpuobs_launch_slot(grid);
    atomicAdd(reinterpret_cast<unsigned long long*>(
                  &table[slot].count[sm % (GPUOBS_LAUNCH_COUNTER_STRIPES + 1)]),
              (unsigned long long)n);
}

// One atomic add counts the attempt and claims a slot; a full stripe counts a drop.
__device__ __forceinline__ gpuobs_event* claim(const gpuobs_function_entry& e, uint32_t stripe,
                                               uint64_t* index_out) {
    gpuobs_control* ctl = reinterpret_cast<gpuobs_control*>(e.control);
    unsigned long long i = atomicAdd(
        reinterpret_cast<unsigned long long*>(&ctl->stripes[stripe].claimed), 1ULL);
    if (i >= e.stripe_capacity) {
        atomicAdd(reinterpret_cast<unsigned long long*>(&ctl->stripes[stripe].dropped), 1ULL);
        *index_out = ~0ULL;
        return nullptr;
    }
    uint64_t index = (uint64_t)stripe * e.stripe_capacity + i;
    *index_out = index;
    return reinterpret_cast<gpuobs_event*>(e.events) + index;
}

// Writes a whole record with four 16-byte stores; `kind` (byte 58) is last in
// the fourth vector, so a record is only marked complete when all of it is there.
__device__ __forceinline__ void store_event(gpuobs_event* r, uint64_t t0, uint64_t t1, uint64_t grid,
                                            uint64_t address, uint64_t pc, uint32_t function_slot,
                                            uint32_t bx, uint32_t by_bz, uint32_t tid_sm,
                                            uint32_t smend_kind_size, uint32_t flags) {
    uint4* p = reinterpret_cast<uint4*>(r);
    p[0] = make_uint4((uint32_t)t0, (uint32_t)(t0 >> 32), (uint32_t)t1, (uint32_t)(t1 >> 32));
    p[1] = make_uint4((uint32_t)grid, (uint32_t)(grid >> 32), (uint32_t)address, (uint32_t)(address >> 32));
    p[2] = make_uint4((uint32_t)pc, (uint32_t)(pc >> 32), function_slot, bx);
    p[3] = make_uint4(by_bz, tid_sm, smend_kind_size, flags);
}

__device__ __forceinline__ uint32_t pack_by_bz() {
    return (blockIdx.y & 0xffff) | ((blockIdx.z & 0xffff) << 16);
}

__device__ __forceinline__ uint64_t block_key(uint64_t grid, uint64_t block) {
    return gpuobs_fmix64(grid * 0x9e3779b97f4a7c15ULL + block) | 1ULL;
}

__device__ __forceinline__ uint32_t warp_slot() {
    uint32_t w;
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
    return w;
}

// Consecutive blocks of a grid get consecutive slots, so the blocks one grid has
// in flight (a few thousand at most) never collide with each other.
__device__ __forceinline__ gpuobs_block_slot* block_slot(const gpuobs_function_entry& e, uint64_t grid,
                                                         uint64_t block) {
    uint64_t i = (gpuobs_fmix64(grid) + block) & (GPUOBS_BLOCK_TABLE_SIZE - 1);
    return reinterpret_cast<gpuobs_block_slot*>(e.block_table) + i;
}

// Entry and exits both find-or-insert: whichever thread of the block comes first
// claims the slot, so warps that exit before the leader has entered still count.
__device__ __forceinline__ bool claim_block_slot(gpuobs_block_slot* s, uint64_t key) {
    unsigned long long old = atomicCAS(reinterpret_cast<unsigned long long*>(&s->key), 0ULL, (unsigned long long)key);
    return old == 0ULL || old == key;
}

__device__ __forceinline__ gpuobs_leader_slot* leader_slot(const gpuobs_function_entry& e, uint32_t sm) {
    uint32_t w = warp_slot();
    if (sm >= GPUOBS_MAX_STRIPES || w >= GPUOBS_LEADER_TABLE_WAYS) return nullptr;
    return reinterpret_cast<gpuobs_leader_slot*>(e.leader_table) + sm * GPUOBS_LEADER_TABLE_WAYS + w;
}

__device__ __forceinline__ uint32_t threads_per_block() { return blockDim.x * blockDim.y * blockDim.z; }

// Stamps an end on a block event: the latest stamp wins, so the order in which
// the leader's exit and the completing exit arrive does not matter.
__device__ __forceinline__ void stamp_end(gpuobs_event* r, uint32_t sm, bool confirmed) {
    atomicMax(reinterpret_cast<unsigned long long*>(&r->time_end), (unsigned long long)globaltimer());
    r->sm_id_end = (uint16_t)sm;
    unsigned int* flags_word = reinterpret_cast<unsigned int*>(&r->flags);  // flags + reserved, 4-byte aligned
    if (confirmed) atomicAnd(flags_word, ~(unsigned int)GPUOBS_BLOCK_END_LEADER);
    __threadfence();
    r->kind = GPUOBS_EVENT_BLOCK;
}

}  // namespace

// ---- block rungs ----------------------------------------------------------

GPUOBS_PATCH gpuobs_block_noop(void* userdata, uint64_t pc) {
    return SANITIZER_PATCH_SUCCESS;
}

GPUOBS_PATCH gpuobs_block_counter(void* userdata, uint64_t pc) {
    if ((threadIdx.x | threadIdx.y | threadIdx.z) != 0 || userdata == nullptr)
        return SANITIZER_PATCH_SUCCESS;
    gpuobs_function_entry e = load_entry(userdata);
    count_for_launch(e, grid_id(), sm_id(), 1);
    return SANITIZER_PATCH_SUCCESS;
}

// Block start: the leader (thread 0,0,0) claims the block's event, writes its
// start, remembers the event under its own warp slot, and registers the block's
// exit counter.
GPUOBS_PATCH gpuobs_block_trace_enter(void* userdata, uint64_t pc) {
    if ((threadIdx.x | threadIdx.y | threadIdx.z) != 0 || userdata == nullptr)
        return SANITIZER_PATCH_SUCCESS;
    gpuobs_function_entry e = load_entry(userdata);
    uint64_t t0 = globaltimer();
    uint32_t sm = sm_id();
    uint64_t grid = grid_id();
    count_for_launch(e, grid, sm, 1);
    uint64_t index;
    gpuobs_event* r = claim(e, stripe_of(e, sm), &index);
    if (r != nullptr) {
        // The end is still unconfirmed; kind stays EMPTY until an exit stamps it.
        store_event(r, t0, 0, grid, 0, 0, e.function_slot, blockIdx.x, pack_by_bz(), sm << 16, sm,
                    GPUOBS_BLOCK_END_LEADER);
    }
    uint64_t block = flat_block_index();
    uint64_t key = block_key(grid, block);
    if (gpuobs_leader_slot* ls = leader_slot(e, sm)) {
        ls->event_index = index;
        ls->key = key;
    }
    gpuobs_block_slot* bs = block_slot(e, grid, block);
    if (claim_block_slot(bs, key)) {
        bs->event_index = index;
        bs->total_threads = threads_per_block();
        __threadfence();
        bs->ready = 1;
    } else {
        gpuobs_control* ctl = reinterpret_cast<gpuobs_control*>(e.control);
        atomicAdd(reinterpret_cast<unsigned long long*>(&ctl->lost_block_ends), 1ULL);
    }
    return SANITIZER_PATCH_SUCCESS;
}

// Block end, defined as the moment the block's last thread passes its exit:
// each group of threads exiting together adds its size to the block's exit
// count, and the group that completes the count stamps the end. The leader also
// stamps its own exit, flagged until the count confirms it, so every event is
// complete even when the count cannot be kept (a table collision).
GPUOBS_PATCH gpuobs_block_trace_exit(void* userdata, uint64_t pc) {
    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    uint32_t mask = __activemask();
    if (lane_id() != (uint32_t)(__ffs(mask) - 1)) return SANITIZER_PATCH_SUCCESS;
    gpuobs_function_entry e = load_entry(userdata);
    uint32_t sm = sm_id();
    uint64_t grid = grid_id(), block = flat_block_index();
    uint64_t key = block_key(grid, block);
    gpuobs_event* events = reinterpret_cast<gpuobs_event*>(e.events);
    if (flat_thread_index() < 32 && (mask & 1u)) {  // this group holds the leader
        gpuobs_leader_slot* ls = leader_slot(e, sm);
        if (ls != nullptr && ls->key == key && ls->event_index != ~0ULL) stamp_end(events + ls->event_index, sm, false);
        __threadfence();
    }
    gpuobs_block_slot* bs = block_slot(e, grid, block);
    if (!claim_block_slot(bs, key)) return SANITIZER_PATCH_SUCCESS;
    uint32_t total = threads_per_block(), n = __popc(mask);
    uint32_t before = atomicAdd(&bs->exited_threads, n);
    if (before >= total || before + n < total) return SANITIZER_PATCH_SUCCESS;
    __threadfence();
    if (*reinterpret_cast<volatile uint32_t*>(&bs->ready) == 1) {
        uint64_t index = *reinterpret_cast<volatile uint64_t*>(&bs->event_index);
        if (index != ~0ULL) stamp_end(events + index, sm, true);
    }
    // Free the slot for the next block that hashes here.
    bs->ready = 0;
    bs->exited_threads = 0;
    __threadfence();
    *reinterpret_cast<volatile uint64_t*>(&bs->key) = 0;
    return SANITIZER_PATCH_SUCCESS;
}

// ---- memory rungs ---------------------------------------------------------

GPUOBS_PATCH gpuobs_mem_noop(void* userdata, uint64_t pc, void* ptr, uint32_t size, uint32_t flags,
                             const void* data) {
    return SANITIZER_PATCH_SUCCESS;
}

// Every access counted exactly (one add per warp group, spread by SM); the
// access is captured when the hash of (pc, thread, block) has its low
// sample_shift bits zero (shift 0 = mem_full, every access).
GPUOBS_PATCH gpuobs_mem_access(void* userdata, uint64_t pc, void* ptr, uint32_t size, uint32_t flags,
                               const void* data) {
    if (userdata == nullptr) return SANITIZER_PATCH_SUCCESS;
    gpuobs_function_entry e = load_entry(userdata);
    uint32_t mask = __activemask();
    uint32_t sm = sm_id();
    uint64_t grid = grid_id();
    if (lane_id() == (uint32_t)(__ffs(mask) - 1)) count_for_launch(e, grid, sm, __popc(mask));
    uint32_t tid = flat_thread_index();
    uint64_t h = gpuobs_fmix64(pc ^ ((uint64_t)tid << 40) ^ (flat_block_index() * 0x9e3779b97f4a7c15ULL));
    if ((h & ((1ULL << e.sample_shift) - 1)) != 0) return SANITIZER_PATCH_SUCCESS;
    uint64_t index;
    gpuobs_event* r = claim(e, stripe_of(e, sm), &index);
    if (r == nullptr) return SANITIZER_PATCH_SUCCESS;
    uint32_t smend_kind_size = sm | ((uint32_t)GPUOBS_EVENT_MEMORY << 16) | ((size & 0xff) << 24);
    store_event(r, globaltimer(), 0, grid, (uint64_t)ptr, pc, e.function_slot, blockIdx.x,
                pack_by_bz(), (tid & 0xffff) | (sm << 16), smend_kind_size, flags & 0xffff);
    return SANITIZER_PATCH_SUCCESS;
}
