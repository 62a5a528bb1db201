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
extern "C" __global__ void gpuobs_gather_counts(uint64_t* table, uint64_t* totals, uint32_t slots, uint32_t stripes) {
    for (uint32_t slot = blockIdx.x * blockDim.x + threadIdx.x; slot < slots; slot += gridDim.x * blockDim.x) {
        uint64_t sum = 0;
        for (uint32_t k = 0; k < stripes; ++k) {
            sum += table[(uint64_t)k * slots + slot];
        }
        totals[slot] = sum;
    }
}
