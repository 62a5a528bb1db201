// How many records each SM's ring gets: a power of two (a ring position maps to its
// record with a mask). From --capacity N, the fewest that keep at least N in all; from
// the device memory budget, the most that fit it. One header with no dependencies, so
// that tests/native/ring_capacity_check.cpp holds exporter/gpuobs/analysis/
// ring_capacity.py (what `info` says was kept) to the very rule the tool applies.
#pragma once
#include <cstdint>

namespace gpuobs {

// At least `asked` records over `stripes` rings: asked / stripes rounded up to a power of
// two (1,048,576 on 132 SMs: 8,192 each, 1,081,344 in all; rounding down gave 4,096 each).
inline uint64_t stripe_capacity_asked(uint64_t asked, uint32_t stripes) {
    if (stripes == 0) stripes = 1;
    const uint64_t wanted = (asked + stripes - 1) / stripes;
    uint64_t cap = 1;
    while (cap < wanted) cap *= 2;
    return cap;
}

// The most records per ring, a power of two, that `records` in all hold (at least 1).
inline uint64_t stripe_capacity_fitting(uint64_t records, uint32_t stripes) {
    if (stripes == 0) stripes = 1;
    const uint64_t fits = records / stripes;
    uint64_t cap = 1;
    while (cap * 2 <= fits) cap *= 2;
    return cap;
}

}  // namespace gpuobs
