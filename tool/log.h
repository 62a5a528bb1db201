// One-line diagnostics on stderr, always prefixed "gpuobs:", never fatal.
#pragma once
#include <cstdio>

#define GPUOBS_LOG(...)                    \
    do {                                   \
        std::fprintf(stderr, "gpuobs: ");  \
        std::fprintf(stderr, __VA_ARGS__); \
        std::fprintf(stderr, "\n");        \
    } while (0)
