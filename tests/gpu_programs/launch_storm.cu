// A launch storm: T host threads, each on its own non-blocking stream (or one
// shared: STORM_SHARED_STREAM=1), each
// launching N small kernels (B blocks of 128 threads; every thread one load and
// one store) with a stream sync every K launches, so the context is never
// quiet. Prints the wall time and what it launched as JSON.
//   launch_storm THREADS LAUNCHES BLOCKS SYNC_EVERY
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cuda_check.cuh"

__global__ void storm_kernel(const float* in, float* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] * 2.0f + 1.0f;
}

// STORM_HOST_GATE=1: each thread's stream first runs this, which spins until the
// thread writes its flag after its last launch: every launch queues behind work
// that waits on the launching thread itself (as a host-written flag can).
__global__ void gate_kernel(const volatile int* open) {
    while (*open == 0) {}
}

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: launch_storm THREADS LAUNCHES BLOCKS SYNC_EVERY\n");
        return 2;
    }
    const int threads = std::atoi(argv[1]), launches = std::atoi(argv[2]), blocks = std::atoi(argv[3]),
              every = std::atoi(argv[4]);
    CHECK(cudaFree(nullptr));
    // STORM_SYNC_SLEEP_US: each thread sleeps this long after each sync (a program
    // that does host work between batches). STORM_STACK_BYTES: raise the
    // per-thread stack limit first (a diagnosis knob).
    const char* sleep_env = std::getenv("STORM_SYNC_SLEEP_US");
    const int sync_sleep_us = sleep_env ? std::atoi(sleep_env) : 0;
    if (const char* stack = std::getenv("STORM_STACK_BYTES"))
        CHECK(cudaDeviceSetLimit(cudaLimitStackSize, std::atoi(stack)));
    const bool gate = std::getenv("STORM_HOST_GATE") != nullptr;
    if (gate && every <= launches) {
        std::fprintf(stderr,
                     "STORM_HOST_GATE needs SYNC_EVERY > LAUNCHES (a sync before the gate opens never returns)\n");
        return 2;
    }
    // STORM_SHARED_STREAM=1: every thread launches on one stream, shared.
    const bool shared = std::getenv("STORM_SHARED_STREAM") != nullptr;
    if (shared && gate) {
        std::fprintf(stderr, "STORM_SHARED_STREAM and STORM_HOST_GATE do not go together\n");
        return 2;
    }
    cudaStream_t shared_stream = nullptr;
    if (shared) CHECK(cudaStreamCreateWithFlags(&shared_stream, cudaStreamNonBlocking));
    // On a shared stream every thread launches once before any goes on: from
    // then on the stream is known to be launched on by several threads.
    std::atomic<int> launched_once{0};
    std::vector<int*> gates(threads, nullptr);
    if (gate) {
        // Loaded before the gate shuts: a lazily loaded kernel's first launch may
        // need the context idle, which a spinning gate never lets it be.
        cudaFuncAttributes attributes;
        CHECK(cudaFuncGetAttributes(&attributes, storm_kernel));
    }
    if (gate)
        for (auto& g : gates) {
            CHECK(cudaHostAlloc(&g, sizeof(int), cudaHostAllocMapped));
            *g = 0;
        }
    std::vector<float*> bufs(2 * threads);
    for (auto& b : bufs) CHECK(cudaMalloc(&b, blocks * 128 * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    // When each thread's first launch returned and its first batch synced: the
    // first launch loads (and under gpuobs patches) the module.
    std::vector<double> first_launch(threads), first_batch(threads);
    auto since = [&t0] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            cudaStream_t s = shared_stream;
            if (!shared) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            if (gate) {
                int* open = nullptr;
                CHECK(cudaHostGetDevicePointer(&open, gates[t], 0));
                gate_kernel<<<1, 1, 0, s>>>(open);
            }
            for (int l = 0; l < launches; ++l) {
                storm_kernel<<<blocks, 128, 0, s>>>(bufs[2 * t], bufs[2 * t + 1]);
                if (l == 0) first_launch[t] = since();
                if (l == 0 && shared) {
                    ++launched_once;
                    while (launched_once.load() < threads) std::this_thread::yield();
                }
                if ((l + 1) % every == 0) {
                    CHECK(cudaStreamSynchronize(s));
                    if (l + 1 == every) first_batch[t] = since();
                    if (sync_sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sync_sleep_us));
                }
            }
            if (gate) *static_cast<volatile int*>(gates[t]) = 1;
            // A shared stream is synchronised once, after every thread's last launch
            // (a sync while another thread launches on the stream would settle launches
            // it did not wait for: gpuobs cannot tell those apart yet).
            if (shared) {
                ++launched_once;
                while (launched_once.load() < 2 * threads) std::this_thread::yield();
                if (t != 0) return;
            }
            CHECK(cudaStreamSynchronize(s));
        });
    }
    for (auto& th : pool) th.join();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK(cudaDeviceSynchronize());
    std::printf(
        "{\"ms\": %.3f, \"threads\": %d, \"launches_per_thread\": %d, \"blocks\": %d, \"threads_per_block\": 128, "
        "\"accesses_per_launch\": %d, \"first_launch_ms\": %.3f, \"first_batch_ms\": %.3f}\n",
        ms, threads, launches, blocks, blocks * 128 * 2, *std::max_element(first_launch.begin(), first_launch.end()),
        *std::max_element(first_batch.begin(), first_batch.end()));
    return 0;
}
