// Launches, resets the device (cudaDeviceReset destroys the context), then
// launches again in the new context: both contexts must be recorded alike.
//   device_reset OUT.bin -> rows (truth.cuh) of all launches of both contexts
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "truth.cuh"

#include "cuda_check.cuh"

static void run(int launches, int blocks, std::vector<TruthRow>* all) {
    TruthRow* rows;
    float* sink;
    CHECK(cudaMalloc(&rows, launches * blocks * sizeof(TruthRow)));
    CHECK(cudaMemset(rows, 0xFF, launches * blocks * sizeof(TruthRow)));
    CHECK(cudaMalloc(&sink, 4));
    for (int l = 0; l < launches; ++l)
        gt_plain<<<blocks, 128>>>(rows + l * blocks, sink, 300, all->size() / blocks + l + 1);
    CHECK(cudaDeviceSynchronize());
    size_t at = all->size();
    all->resize(at + launches * blocks);
    CHECK(cudaMemcpy(all->data() + at, rows, launches * blocks * sizeof(TruthRow), cudaMemcpyDeviceToHost));
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    std::vector<TruthRow> all;
    run(3, 200, &all);
    CHECK(cudaDeviceReset());
    run(5, 200, &all);
    FILE* f = std::fopen(argv[1], "wb");
    if (!f || std::fwrite(all.data(), sizeof(TruthRow), all.size(), f) != all.size()) return 4;
    std::fclose(f);
    std::printf("{\"before\": 3, \"after\": 5, \"blocks\": 200}\n");
    return 0;
}
