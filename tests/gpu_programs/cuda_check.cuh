// CHECK(call): a CUDA runtime call that must succeed; on an error the test program
// prints the call and the error and exits with status 3.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                         \
    do {                                                                 \
        cudaError_t e = (x);                                             \
        if (e != cudaSuccess) {                                          \
            std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
            std::exit(3);                                                \
        }                                                                \
    } while (0)
