// Host clocks, in nanoseconds (defined in context_state.cpp).
#pragma once
#include <time.h>

#include <cstdint>

namespace gpuobs {

uint64_t clock_ns(clockid_t id);  // any clock_gettime clock
uint64_t monotonic_ns();

}  // namespace gpuobs
