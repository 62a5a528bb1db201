// A program that uses only the CUDA driver API (no runtime), as JAX/XLA,
// numba-cuda and language bindings do: makes a context current one of four ways,
// loads the ground-truth kernel from PTX, launches it three times, and writes
// the rows the kernel recorded (truth.cuh layout) to OUT.bin.
//   driver_only KERNELS.ptx OUT.bin retain_set|retain_push|create|blocking_sync
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define CHECK(x)                                               \
    do {                                                       \
        CUresult r = (x);                                      \
        if (r != CUDA_SUCCESS) {                               \
            const char* s = nullptr;                           \
            cuGetErrorString(r, &s);                           \
            std::fprintf(stderr, "%s: %s\n", #x, s ? s : "?"); \
            std::exit(3);                                      \
        }                                                      \
    } while (0)

struct TruthRow {
    unsigned long long v[7];
};  // truth.cuh's layout

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: driver_only KERNELS.ptx OUT.bin CONTEXT_KIND\n");
        return 2;
    }
    std::ifstream in(argv[1]);
    std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string kind = argv[3];
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    if (kind == "create") {
        CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
    } else {
        if (kind == "blocking_sync") CHECK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
        CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
        if (kind == "retain_push")
            CHECK(cuCtxPushCurrent(ctx));
        else
            CHECK(cuCtxSetCurrent(ctx));
    }
    CUmodule module;
    CHECK(cuModuleLoadData(&module, ptx.c_str()));
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, module, "gt_plain"));
    const int launches = 3, blocks = 300;
    CUdeviceptr rows, sink;
    CHECK(cuMemAlloc(&rows, launches * blocks * sizeof(TruthRow)));
    CHECK(cuMemsetD8(rows, 0xFF, launches * blocks * sizeof(TruthRow)));
    CHECK(cuMemAlloc(&sink, 4));
    for (int l = 0; l < launches; ++l) {
        CUdeviceptr r = rows + l * blocks * sizeof(TruthRow);
        int iterations = 300;
        unsigned long long tag = l + 1;
        void* args[] = {&r, &sink, &iterations, &tag};
        CHECK(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    }
    CHECK(cuCtxSynchronize());
    std::vector<TruthRow> host(launches * blocks);
    CHECK(cuMemcpyDtoH(host.data(), rows, host.size() * sizeof(TruthRow)));
    FILE* out = std::fopen(argv[2], "wb");
    if (!out || std::fwrite(host.data(), sizeof(TruthRow), host.size(), out) != host.size()) return 4;
    std::fclose(out);
    std::printf("{\"launches\": %d, \"blocks\": %d, \"context\": \"%s\"}\n", launches, blocks, kind.c_str());
    return 0;
}
