// When the rings are filling faster than quiet points drain them. The host knows
// every launch's grid before it runs, so it can tell, between quiet points, when
// a stripe may run out of room: it then reads the claim counters and, if a stripe
// is past half full with nothing left to drain, makes a quiet point of its own
// (context_pressure.cpp). Plain arithmetic, checked by tests/native/ring_cut_check.cpp.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpuobs {

// How many of a launch's blocks one stripe (SM) may take, as planned from the
// grid alone: a grid wider than the GPU spreads over every SM (twice the even
// share, for SMs other kernels keep busy), a small one may land on a single SM.
inline uint64_t stripe_share(uint64_t blocks, uint32_t stripes) {
    if (stripes == 0) return blocks;
    return std::min(blocks, 2 * ((blocks + stripes - 1) / stripes) + 16);
}

struct FillCheck {
    uint64_t worst = 0;       // the fullest stripe's undrained claims, plus the share still to come
    bool relieve = false;     // past half the stripe: the ring needs draining now
    uint64_t next_check = 0;  // planned shares until the next check
};

// claimed: each stripe's counter now; drained: each stripe's first undrained
// position; coming: the planned share of blocks launched but not yet started.
// Checks come sooner the fuller the fullest stripe is, and never more often
// than every 1/32 of a stripe.
inline FillCheck check_fill(const std::vector<uint64_t>& claimed, const std::vector<uint64_t>& drained, uint64_t coming,
                            uint64_t per_stripe) {
    FillCheck f;
    for (size_t s = 0; s < claimed.size() && s < drained.size(); ++s)
        f.worst = std::max(f.worst, claimed[s] > drained[s] ? claimed[s] - drained[s] : 0);
    f.worst += coming;
    const uint64_t half = per_stripe / 2;
    f.relieve = f.worst >= half;
    f.next_check = std::max(f.relieve ? 0 : (half - f.worst) / 2, std::max<uint64_t>(per_stripe / 32, 1));
    return f;
}

}  // namespace gpuobs
