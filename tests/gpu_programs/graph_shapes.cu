// CUDA graphs of the shapes a serving stack replays, for the graph tests: a chain
// with the same kernel at many nodes and a memset node, a fork-join graph with
// parallel branches (captured from two streams), and a graph holding a child
// graph; each replayed many times with no synchronisation between replays, and
// the chain also from a second stream. Every node's kernel counts its own blocks.
//   graph_shapes -> JSON: per graph, its kernel nodes' grids and its replays
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_check.cuh"

__global__ void node_kernel(unsigned long long* blocks, int spin) {
    if (threadIdx.x == 0) atomicAdd(blocks, 1ull);
    float v = threadIdx.x;
    for (int i = 0; i < spin; ++i) v = v * 0.999f + 1.0f;
    if (v == -1.0f) blocks[1] = 0;
}

__global__ void other_kernel(unsigned long long* blocks) {
    if (threadIdx.x == 0) atomicAdd(blocks, 1ull);
}

int main() {
    unsigned long long* blocks;
    int* scratch;
    CHECK(cudaMalloc(&blocks, 2 * sizeof(unsigned long long)));
    CHECK(cudaMemset(blocks, 0, 2 * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&scratch, 1 << 20));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    std::string json = "{\"graphs\": [";

    // A: a chain, node_kernel at six nodes (one grid each), a memset node among them.
    cudaGraph_t ga;
    cudaGraphExec_t ea;
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 6; ++k) {
        node_kernel<<<100 * (k + 1), 128, 0, s1>>>(blocks, 50);
        if (k == 2) CHECK(cudaMemsetAsync(scratch, 0, 1 << 20, s1));
    }
    CHECK(cudaStreamEndCapture(s1, &ga));
    CHECK(cudaGraphInstantiate(&ea, ga, 0));
    json += "{\"name\": \"chain\", \"grids\": [100, 200, 300, 400, 500, 600], \"replays\": 25}";

    // B: fork-join over two streams: root, two branches of two, join.
    cudaGraph_t gb;
    cudaGraphExec_t eb;
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    other_kernel<<<64, 64, 0, s1>>>(blocks);
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    node_kernel<<<132, 256, 0, s1>>>(blocks, 200);
    node_kernel<<<133, 256, 0, s2>>>(blocks, 200);
    node_kernel<<<134, 256, 0, s1>>>(blocks, 200);
    node_kernel<<<135, 256, 0, s2>>>(blocks, 200);
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s1, join, 0));
    other_kernel<<<65, 64, 0, s1>>>(blocks);
    CHECK(cudaStreamEndCapture(s1, &gb));
    CHECK(cudaGraphInstantiate(&eb, gb, 0));
    json += ", {\"name\": \"fork_join\", \"grids\": [64, 132, 133, 134, 135, 65], \"replays\": 10}";

    // C: an outer kernel, then a child graph of two kernels.
    cudaGraph_t child, gc;
    cudaGraphExec_t ec;
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    node_kernel<<<77, 96, 0, s1>>>(blocks, 10);
    other_kernel<<<78, 96, 0, s1>>>(blocks);
    CHECK(cudaStreamEndCapture(s1, &child));
    CHECK(cudaGraphCreate(&gc, 0));
    cudaGraphNode_t outer, inner;
    cudaKernelNodeParams p = {};
    void* args[] = {&blocks};
    p.func = (void*)other_kernel;
    p.gridDim = dim3(79);
    p.blockDim = dim3(32);
    p.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&outer, gc, nullptr, 0, &p));
    CHECK(cudaGraphAddChildGraphNode(&inner, gc, &outer, 1, child));
    CHECK(cudaGraphInstantiate(&ec, gc, 0));
    json += ", {\"name\": \"child\", \"grids\": [79, 77, 78], \"replays\": 10}";

    for (int r = 0; r < 20; ++r) CHECK(cudaGraphLaunch(ea, s1));
    for (int r = 0; r < 10; ++r) CHECK(cudaGraphLaunch(eb, s1));
    for (int r = 0; r < 10; ++r) CHECK(cudaGraphLaunch(ec, s2));
    for (int r = 0; r < 5; ++r) CHECK(cudaGraphLaunch(ea, r % 2 ? s1 : s2));  // one exec from two streams
    CHECK(cudaDeviceSynchronize());
    unsigned long long counted = 0;
    CHECK(cudaMemcpy(&counted, blocks, sizeof counted, cudaMemcpyDeviceToHost));
    json += "], \"device_blocks\": " + std::to_string(counted) + "}";
    std::printf("%s\n", json.c_str());
    return 0;
}
