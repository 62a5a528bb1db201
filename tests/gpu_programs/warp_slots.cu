// Ground truth for block ends bounded from warp-slot reuse: every warp of every
// block writes its SM, its hardware warp slot (%warpid, read at its first and
// its last instruction) and the %globaltimer of both. One run covers the shapes
// the block_starts accuracy study needs; each shape is one launch with its own
// rows, written to <out>/<shape>.warps (struct WarpRow[]), with a line per shape
// on stdout: "<shape> <grid id> <blocks> <warps per block>".
//
//   warp_slots OUT_DIR [scale]     scale divides the block counts (default 1)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "cuda_check.cuh"

struct WarpRow {
    unsigned long long grid;
    unsigned long long block;  // flat block index
    unsigned long long t_first;
    unsigned long long t_last;
    unsigned int sm;
    unsigned int warp_slot_first;
    unsigned int warp_slot_last;
    unsigned int warp_in_block;
    unsigned int sm_last;
    unsigned int pad[3];
};
static_assert(sizeof(WarpRow) == 64, "one row per cache line");

__device__ __forceinline__ unsigned long long timer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned int special_smid() {
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ unsigned int special_warpid() {
    unsigned int w;
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
    return w;
}

// iterations per block: base, or base x (1..20) by a hash of the block (uneven).
__device__ __forceinline__ void spin_and_record(WarpRow* rows, int base, int uneven, float* sink) {
    const unsigned long long t0 = timer();
    const unsigned int sm0 = special_smid(), slot0 = special_warpid();
    const unsigned int flat = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned long long block = blockIdx.x + (unsigned long long)gridDim.x * blockIdx.y;
    int iterations = base;
    if (uneven) iterations *= 1 + (int)((block * 2654435761ull >> 7) % 20);
    float v = flat;
    for (int i = 0; i < iterations; ++i) v = v * 0.999f + 1.0f;
    if (v == -1.0f) *sink = v;
    __syncwarp();
    if ((flat & 31) == 0) {
        const unsigned int warps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
        WarpRow* r = rows + block * warps + flat / 32;
        unsigned long long g;
        asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
        r->grid = g;
        r->block = block;
        r->t_first = t0;
        r->sm = sm0;
        r->warp_slot_first = slot0;
        r->warp_in_block = flat / 32;
        r->warp_slot_last = special_warpid();
        r->sm_last = special_smid();
        r->t_last = timer();
    }
}

extern "C" __global__ void ws_spin(WarpRow* rows, int base, int uneven, float* sink) {
    spin_and_record(rows, base, uneven, sink);
}

// One block per SM, held by a large dynamic shared-memory request.
extern "C" __global__ void ws_one_per_sm(WarpRow* rows, int base, int uneven, float* sink) {
    extern __shared__ float big[];
    if (threadIdx.x == 0) big[0] = 1.0f;
    spin_and_record(rows, base, uneven, sink);
}

struct Shape {
    const char* name;
    unsigned blocks;
    unsigned threads;
    int base;
    int uneven;
    int stream;  // shapes on stream 1 and 2 run concurrently with the one before
    bool one_per_sm;
};

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: warp_slots OUT_DIR [scale]\n");
        return 2;
    }
    const std::string out = argv[1];
    const unsigned scale = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const Shape shapes[] = {
        {"elementwise", 829328 / scale, 128, 8, 0, 0, false},
        {"uneven", 16 * (unsigned)sms, 256, 400, 1, 0, false},
        {"one_wave", (unsigned)sms, 1024, 4000, 0, 0, false},
        {"one_per_sm", 3 * (unsigned)sms, 256, 4000, 1, 0, true},
        // Two kernels of 3- and 5-warp blocks at once: slots freed by one are taken by the other.
        {"mixed_a", 40000 / scale, 96, 60, 1, 1, false},
        {"mixed_b", 40000 / scale, 160, 60, 1, 2, false},
    };
    cudaStream_t streams[3] = {0, 0, 0};
    CHECK(cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&streams[2], cudaStreamNonBlocking));
    float* sink;
    CHECK(cudaMalloc(&sink, 4));
    const size_t one_per_sm_smem = 200 * 1024;
    CHECK(cudaFuncSetAttribute(ws_one_per_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)one_per_sm_smem));
    std::vector<WarpRow*> rows;
    std::vector<size_t> counts;
    for (const Shape& s : shapes) {
        const size_t n = (size_t)s.blocks * ((s.threads + 31) / 32);
        WarpRow* d;
        CHECK(cudaMalloc(&d, n * sizeof(WarpRow)));
        CHECK(cudaMemset(d, 0, n * sizeof(WarpRow)));
        rows.push_back(d);
        counts.push_back(n);
    }
    CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i) {
        const Shape& s = shapes[i];
        if (s.one_per_sm)
            ws_one_per_sm<<<s.blocks, s.threads, one_per_sm_smem, streams[s.stream]>>>(rows[i], s.base, s.uneven, sink);
        else
            ws_spin<<<s.blocks, s.threads, 0, streams[s.stream]>>>(rows[i], s.base, s.uneven, sink);
        CHECK(cudaGetLastError());
        if (s.stream == 0 || s.stream == 2) CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < rows.size(); ++i) {
        std::vector<WarpRow> host(counts[i]);
        CHECK(cudaMemcpy(host.data(), rows[i], counts[i] * sizeof(WarpRow), cudaMemcpyDeviceToHost));
        const std::string path = out + "/" + shapes[i].name + ".warps";
        FILE* f = fopen(path.c_str(), "wb");
        if (!f || fwrite(host.data(), sizeof(WarpRow), host.size(), f) != host.size()) {
            fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
        }
        fclose(f);
        printf("%s %llu %u %u\n", shapes[i].name, host.empty() ? 0ull : host[0].grid, shapes[i].blocks,
               (shapes[i].threads + 31) / 32);
    }
    return 0;
}
