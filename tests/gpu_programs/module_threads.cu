// Loads one kernel image as 8 separate modules from 8 threads at once (each must
// be patched exactly once), launches each on its own stream, then replays a
// captured CUDA graph 20 times. Prints what it launched as JSON.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#define CHECK_DRV(x)                                             \
    do {                                                         \
        CUresult r = (x);                                        \
        if (r != CUDA_SUCCESS) {                                 \
            std::fprintf(stderr, "%s failed: %d\n", #x, (int)r); \
            std::exit(3);                                        \
        }                                                        \
    } while (0)
#define CHECK_RT(x)                                                             \
    do {                                                                        \
        cudaError_t r = (x);                                                    \
        if (r != cudaSuccess) {                                                 \
            std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(r)); \
            std::exit(3);                                                       \
        }                                                                       \
    } while (0)

__global__ void graph_step(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: module_threads KERNEL.cubin\n");
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_RT(cudaFree(nullptr));
    CUcontext ctx;
    CHECK_DRV(cuCtxGetCurrent(&ctx));
    const int threads = 8, repeats = 3;
    std::atomic<int> ready{0};
    std::vector<int*> counters(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            CHECK_DRV(cuCtxSetCurrent(ctx));
            CHECK_RT(cudaMalloc(&counters[t], sizeof(int)));
            CHECK_RT(cudaMemset(counters[t], 0, sizeof(int)));
            ready.fetch_add(1);
            while (ready.load() < threads) {}
            CUmodule m;
            CHECK_DRV(cuModuleLoadData(&m, image.data()));
            CUfunction f;
            CHECK_DRV(cuModuleGetFunction(&f, m, "count_blocks"));
            CUstream s;
            CHECK_DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
            void* args[] = {&counters[t]};
            for (int r = 0; r < repeats; ++r)
                CHECK_DRV(cuLaunchKernel(f, 1000 + 100 * t, 1, 1, 256, 1, 1, 0, s, args, nullptr));
            CHECK_DRV(cuStreamSynchronize(s));
        });
    }
    for (auto& th : pool) th.join();
    int total_device = 0;
    for (int t = 0; t < threads; ++t) {
        int v = 0;
        CHECK_RT(cudaMemcpy(&v, counters[t], sizeof v, cudaMemcpyDeviceToHost));
        if (v != repeats * (1000 + 100 * t)) {
            std::fprintf(stderr, "thread %d counted %d blocks\n", t, v);
            return 4;
        }
        total_device += v;
    }

    const int n = 762 * 128, replays = 20;
    float* x;
    CHECK_RT(cudaMalloc(&x, n * sizeof(float)));
    cudaStream_t s;
    CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 3; ++k) graph_step<<<762, 128, 0, s>>>(x, n);
    CHECK_RT(cudaStreamEndCapture(s, &graph));
    CHECK_RT(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < replays; ++r) CHECK_RT(cudaGraphLaunch(exec, s));
    CHECK_RT(cudaStreamSynchronize(s));
    std::printf(
        "{\"modules\": %d, \"launches_per_module\": %d, \"device_blocks\": %d, \"graph_replays\": %d, "
        "\"graph_nodes\": 3, \"graph_blocks\": 762}\n",
        threads, repeats, total_device, replays);
    return 0;
}
