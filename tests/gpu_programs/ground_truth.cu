// Launch kinds whose kernels record their own ground truth (truth.cuh), for
// tests/test_gpu_programs.py: a multi-wave 1-D grid, a 3-D grid of 3-D blocks,
// early-exiting threads, thread-block clusters, a cooperative launch with a
// grid sync, programmatic dependent launch, two concurrent streams, and grids
// launched from the device (dynamic parallelism). Built with -rdc=true.
//   ground_truth OUT.bin   -> rows (TruthRow) in OUT.bin; a JSON summary on stdout
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "truth.cuh"

#include "cuda_check.cuh"

extern "C" __global__ void gt_early_exit(TruthRow* rows, float* sink, int iterations, unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    if (threadIdx.x % 3 == 1) {  // a third of the threads leave at once
        truth_end(r);
        return;
    }
    spin(iterations, sink);
    truth_end(r);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1)
    gt_cluster(TruthRow* rows, float* sink, int iterations, unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    spin(iterations, sink);
    cooperative_groups::this_cluster().sync();
    truth_end(r);
}

extern "C" __global__ void gt_coop(TruthRow* rows, float* sink, int iterations, unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    spin(iterations, sink);
    cooperative_groups::this_grid().sync();
    spin(iterations, sink);
    truth_end(r);
}

extern "C" __global__ void gt_pdl_secondary(TruthRow* rows, float* sink, int iterations, unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    cudaGridDependencySynchronize();
    spin(iterations, sink);
    truth_end(r);
}

extern "C" __global__ void gt_child(TruthRow* rows, float* sink, int iterations, unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    spin(iterations, sink);
    truth_end(r);
}

constexpr int kChildBlocks = 3;

extern "C" __global__ void gt_parent(TruthRow* rows, TruthRow* child_rows, float* sink, int iterations,
                                     unsigned long long tag) {
    TruthRow* r = truth_begin(rows, tag);
    if (threadIdx.x == 0)
        gt_child<<<kChildBlocks, 64>>>(child_rows + blockIdx.x * kChildBlocks, sink, iterations, tag + 1);
    spin(iterations, sink);
    truth_end(r);
}

struct Launch {
    const char* name;
    size_t first, count;
};

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: ground_truth OUT.bin\n");
        return 2;
    }
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t capacity = 1 << 16;
    TruthRow* rows;
    float* sink;
    CHECK(cudaMalloc(&rows, capacity * sizeof(TruthRow)));
    CHECK(cudaMemset(rows, 0xFF, capacity * sizeof(TruthRow)));
    CHECK(cudaMalloc(&sink, sizeof(float)));
    std::vector<Launch> launches;
    size_t used = 0;
    auto take = [&](const char* name, size_t blocks) {
        launches.push_back({name, used, blocks});
        used += blocks;
        return rows + used - blocks;
    };
    unsigned long long tag = 1;
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

    gt_plain<<<1000, 128>>>(take("gt_plain", 1000), sink, 400, tag++);                   // several waves
    gt_plain<<<dim3(5, 4, 3), dim3(8, 4, 2)>>>(take("gt_plain", 60), sink, 200, tag++);  // 3-D
    gt_early_exit<<<264, 256>>>(take("gt_early_exit", 264), sink, 800, tag++);
    gt_cluster<<<64, 128>>>(take("gt_cluster", 64), sink, 200, tag++);
    {
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gt_coop, 256, 0));
        int blocks = sms * (per_sm < 2 ? per_sm : 2);
        TruthRow* r = take("gt_coop", blocks);
        int it = 200;
        unsigned long long t = tag++;
        void* args[] = {&r, &sink, &it, &t};
        CHECK(cudaLaunchCooperativeKernel((void*)gt_coop, blocks, 256, args, 0, 0));
    }
    {
        gt_plain<<<400, 128, 0, s1>>>(take("gt_plain", 400), sink, 1500, tag++);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = 300;
        cfg.blockDim = 128;
        cfg.stream = s1;
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&cfg, gt_pdl_secondary, take("gt_pdl_secondary", 300), sink, 200, tag++));
    }
    gt_plain<<<200, 256, 0, s1>>>(take("gt_plain", 200), sink, 3000, tag++);  // two streams at once
    gt_plain<<<200, 256, 0, s2>>>(take("gt_plain", 200), sink, 3000, tag++);
    {
        const int parents = 4;
        TruthRow* pr = take("gt_parent", parents);
        TruthRow* cr = take("gt_child", parents * kChildBlocks);
        gt_parent<<<parents, 32>>>(pr, cr, sink, 200, tag);
        tag += 2;
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<TruthRow> host(used);
    CHECK(cudaMemcpy(host.data(), rows, used * sizeof(TruthRow), cudaMemcpyDeviceToHost));
    FILE* f = std::fopen(argv[1], "wb");
    if (!f || std::fwrite(host.data(), sizeof(TruthRow), used, f) != used) {
        std::fprintf(stderr, "cannot write %s\n", argv[1]);
        return 4;
    }
    std::fclose(f);
    std::printf("{\"sms\": %d, \"launches\": [", sms);
    for (size_t i = 0; i < launches.size(); ++i)
        std::printf("%s{\"name\": \"%s\", \"first\": %zu, \"count\": %zu}", i ? ", " : "", launches[i].name,
                    launches[i].first, launches[i].count);
    std::printf("]}\n");
    return 0;
}
