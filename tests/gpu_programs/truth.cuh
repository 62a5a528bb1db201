// Ground truth written by the kernels themselves: each block's grid id, index,
// SM, and the %globaltimer of its threads' first and last instructions. The GPU
// tests compare gpuobs's records with these, block by block.
#pragma once
#include <stdint.h>

// One block; all fields 64-bit for the atomics. t_last is stored inverted so
// that one atomicMin keeps the latest time on a buffer filled with 0xFF bytes.
struct TruthRow {
    unsigned long long grid;
    unsigned long long block_xy;    // x | y << 32
    unsigned long long block_z_sm;  // z | smid << 32
    unsigned long long t_first;
    unsigned long long t_last_inv;
    unsigned long long tag;       // which launch kind (see ground_truth.cu)
    unsigned long long t_leader;  // thread (0,0,0)'s own first read: the thread whose entry gpuobs times
};

__device__ __forceinline__ unsigned long long truth_timer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ TruthRow* truth_begin(TruthRow* rows, unsigned long long tag) {
    const unsigned long long t = truth_timer();
    const unsigned long long b =
        blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    TruthRow* r = rows + b;
    atomicMin(&r->t_first, t);
    if ((threadIdx.x | threadIdx.y | threadIdx.z) == 0) {
        unsigned long long g;
        unsigned int sm;
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        r->grid = g;
        r->block_xy = blockIdx.x | ((unsigned long long)blockIdx.y << 32);
        r->block_z_sm = blockIdx.z | ((unsigned long long)sm << 32);
        r->tag = tag;
        r->t_leader = t;
    }
    return r;
}

__device__ __forceinline__ void truth_end(TruthRow* r) { atomicMin(&r->t_last_inv, ~truth_timer()); }

__device__ __forceinline__ void spin(int iterations, float* sink) {
    float v = threadIdx.x;
    for (int i = 0; i < iterations; ++i) v = v * 0.999f + 1.0f;
    if (v == -1.0f) *sink = v;  // never true: keeps the loop
}

// A plain kernel, also compiled to PTX for the driver-API program.
extern "C" __global__ void gt_plain(TruthRow* rows, float* sink, int iterations, unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    spin(iterations, sink);
    truth_end(r);
}
