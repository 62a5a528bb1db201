// A one-thread kernel that reads %globaltimer, launched by the host tool between
// two readings of each host clock: the bracket that relates the device clock to
// host clocks, with its width as the uncertainty. Built as an ordinary fatbin.
#include <stdint.h>

extern "C" __global__ void gpuobs_clock_probe(uint64_t* out) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    out[0] = t;
}
