// The tool's own kernels (never patched: loaded while the tool ignores its own
// callbacks). gpuobs_clock_probe: a one-thread kernel that reads %globaltimer, launched by the host tool between
// two readings of each host clock: the bracket that relates the device clock to
// host clocks, with its width as the uncertainty. Built as an ordinary fatbin.
#include <stdint.h>

extern "C" __global__ void gpuobs_clock_probe(uint64_t* out) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    out[0] = t;
}

// The flush's counter harvest: sums the stripes of every launch-counter slot
// into `totals`, on the device, so that the host copies one number per slot
// (512 KiB) instead of the whole striped table (8 MiB). The table is never
// zeroed: kernels may be counting while it runs, and the host takes differences.
// `table` is laid out as gpuobs_launch_counter_index says: stripe-major.
__device__ void gather(const uint64_t* table, uint64_t* totals, uint32_t slots, uint32_t stripes) {
    for (uint32_t slot = blockIdx.x * blockDim.x + threadIdx.x; slot < slots; slot += gridDim.x * blockDim.x) {
        uint64_t sum = 0;
        for (uint32_t k = 0; k < stripes; ++k) {
            sum += table[(uint64_t)k * slots + slot];
        }
        totals[slot] = sum;
    }
}

extern "C" __global__ void gpuobs_gather_counts(uint64_t* table, uint64_t* totals, uint32_t slots, uint32_t stripes) {
    gather(table, totals, slots, stripes);
}

// An in-stream snapshot (tool/pressure_valve.cpp): launched on the program's
// stream behind its launches, so every counter it reads is final for them. It
// harvests the counters as above, copies the control block (claims, drops,
// unmatched exits), and the last block to finish publishes `seq`, once every
// block's writes are visible, for the host to poll.
extern "C" __global__ void gpuobs_snapshot(const uint64_t* table, const uint64_t* control, uint64_t* totals,
                                           uint64_t* control_copy, uint32_t slots, uint32_t stripes,
                                           uint32_t control_words, unsigned int* blocks_done,
                                           unsigned long long* published, unsigned long long seq) {
    gather(table, totals, slots, stripes);
    for (uint32_t w = blockIdx.x * blockDim.x + threadIdx.x; w < control_words; w += gridDim.x * blockDim.x)
        control_copy[w] = control[w];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(blocks_done, 1u) == gridDim.x - 1) {
        *blocks_done = 0;  // ready for the slot's next use
        __threadfence();
        atomicExch(published, seq);
    }
}
