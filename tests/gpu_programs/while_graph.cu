// A CUDA graph with a WHILE conditional node, as XLA's command buffers build for a
// loop: before it a plain kernel node (outside the conditional), in its body a kernel
// that counts its blocks and a kernel that counts down the loop and sets the
// condition. Each replay runs the body exactly ITERS times; the graph is replayed
// REPLAYS times, synchronising after each.
//   while_graph ITERS REPLAYS -> JSON: the grids, iterations and replays, and the
//   blocks each kernel counted itself
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

__global__ void before_loop(unsigned long long* blocks, int* left, int iters) {
    if (threadIdx.x == 0) atomicAdd(&blocks[0], 1ull);
    if (blockIdx.x == 0 && threadIdx.x == 0) *left = iters;
}

__global__ void loop_body(unsigned long long* blocks) {
    if (threadIdx.x == 0) atomicAdd(&blocks[1], 1ull);
}

__global__ void loop_condition(unsigned long long* blocks, int* left, cudaGraphConditionalHandle handle) {
    if (threadIdx.x == 0) atomicAdd(&blocks[2], 1ull);
    if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(handle, --*left > 0 ? 1 : 0);
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 5, replays = argc > 2 ? std::atoi(argv[2]) : 4;
    const unsigned before_grid = 48, body_grid = 96, cond_grid = 1;
    unsigned long long* blocks;
    int* left;
    CHECK(cudaMalloc(&blocks, 3 * sizeof(unsigned long long)));
    CHECK(cudaMemset(blocks, 0, 3 * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&left, sizeof(int)));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    cudaGraph_t graph, body;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle handle;
    CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));

    cudaGraphNode_t before, loop, body_node, cond_node;
    cudaKernelNodeParams k = {};
    void* before_args[] = {&blocks, &left, (void*)&iters};
    k.func = (void*)before_loop;
    k.gridDim = dim3(before_grid);
    k.blockDim = dim3(128);
    k.kernelParams = before_args;
    CHECK(cudaGraphAddKernelNode(&before, graph, nullptr, 0, &k));

    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = handle;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    CHECK(cudaGraphAddNode(&loop, graph, &before, nullptr, 1, &cp));
    body = cp.conditional.phGraph_out[0];

    void* body_args[] = {&blocks};
    k.func = (void*)loop_body;
    k.gridDim = dim3(body_grid);
    k.kernelParams = body_args;
    CHECK(cudaGraphAddKernelNode(&body_node, body, nullptr, 0, &k));
    void* cond_args[] = {&blocks, &left, &handle};
    k.func = (void*)loop_condition;
    k.gridDim = dim3(cond_grid);
    k.kernelParams = cond_args;
    CHECK(cudaGraphAddKernelNode(&cond_node, body, &body_node, 1, &k));

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < replays; ++r) {
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaStreamSynchronize(stream));
    }
    unsigned long long host[3];
    CHECK(cudaMemcpy(host, blocks, sizeof host, cudaMemcpyDeviceToHost));
    std::printf(
        "{\"iters\": %d, \"replays\": %d, \"grids\": {\"before_loop\": %u, \"loop_body\": %u, \"loop_condition\": %u}, "
        "\"counted\": {\"before_loop\": %llu, \"loop_body\": %llu, \"loop_condition\": %llu}}\n",
        iters, replays, before_grid, body_grid, cond_grid, host[0], host[1], host[2]);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    return 0;
}
