// A burst the device cannot keep up with: one thread launches N kernels of B
// blocks on one non-blocking stream without synchronising until the end. Each
// block spins on %globaltimer for SPIN_NS, so the device runs far behind the
// host: every launch is enqueued long before its blocks start, unless the host
// was made to wait (gpuobs's ring pressure, with a small --capacity). Prints what
// it launched as JSON.
//   wait_burst LAUNCHES BLOCKS SPIN_NS
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void burst_spin_kernel(unsigned long long spin_ns, unsigned long long* sink) {
    const unsigned long long start = globaltimer();
    unsigned long long now = start;
    while (now - start < spin_ns) now = globaltimer();
    if (threadIdx.x == 0 && now == 0) *sink = now;  // never true: keeps the loop
}

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: wait_burst LAUNCHES BLOCKS SPIN_NS\n");
        return 2;
    }
    const int launches = std::atoi(argv[1]), blocks = std::atoi(argv[2]);
    const unsigned long long spin_ns = std::strtoull(argv[3], nullptr, 10);
    unsigned long long* sink = nullptr;
    CHECK(cudaMalloc(&sink, sizeof *sink));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    burst_spin_kernel<<<1, 32, 0, s>>>(0, sink);  // loads (and under gpuobs patches) the module
    CHECK(cudaStreamSynchronize(s));
    const auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < launches; ++l) burst_spin_kernel<<<blocks, 128, 0, s>>>(spin_ns, sink);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"launches\": %d, \"blocks\": %d, \"spin_ns\": %llu, \"wall_ms\": %.3f}\n", launches + 1, blocks,
                spin_ns, ms);
    return 0;
}
