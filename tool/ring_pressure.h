// When the rings are filling faster than quiet points drain them. The host knows
// every launch's grid before it runs, so it keeps an estimate of the fullest
// stripe: what the last measurement of the claim counters found, plus the share
// of every launch planned since. Past half a stripe a measurement is asked for;
// past three quarters the launching thread waits for a drain, or makes a quiet
// point of its own (pressure_valve.cpp). Plain
// arithmetic, checked against a simulated device by tests/native/ring_pressure_check.cpp.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpuobs {

// A launch's blocks spread evenly over the stripes: what the rings take on average.
inline uint64_t even_share(uint64_t blocks, uint32_t stripes) {
    return stripes == 0 ? blocks : (blocks + stripes - 1) / stripes;
}

// How many of a launch's blocks one stripe (SM) may take, as planned from the
// grid alone: a grid wider than the GPU spreads over every SM (twice the even
// share, for SMs other kernels keep busy), a small one may land on a single SM.
inline uint64_t stripe_share(uint64_t blocks, uint32_t stripes) {
    if (stripes == 0) return blocks;
    return std::min(blocks, 2 * even_share(blocks, stripes) + 16);
}

// In-stream snapshots are queued every this many records of a stripe planned at
// the even share: eight slots (DeviceArena::kSnapshots) then span one ring.
inline uint64_t snapshot_spacing(uint64_t stripe_capacity) { return std::max<uint64_t>(stripe_capacity / 8, 1); }

// A launch's blocks, and block_starts' warp arrivals: one per warp past each block's first.
inline uint64_t grid_blocks(const uint32_t grid[3]) { return (uint64_t)grid[0] * grid[1] * grid[2]; }
inline uint64_t later_warps(uint64_t blocks, const uint32_t block[3]) {
    const uint64_t warps_per_block = ((uint64_t)block[0] * block[1] * block[2] + 31) / 32;
    return warps_per_block > 1 ? blocks * (warps_per_block - 1) : 0;
}

// The fullest stripe's claims not yet drained. claimed: each stripe's counter;
// drained: each stripe's first undrained position.
inline uint64_t undrained_worst(const std::vector<uint64_t>& claimed, const std::vector<uint64_t>& drained) {
    uint64_t worst = 0;
    for (size_t s = 0; s < claimed.size() && s < drained.size(); ++s)
        worst = std::max(worst, claimed[s] > drained[s] ? claimed[s] - drained[s] : 0);
    return worst;
}

// The estimate of the fullest stripe's fill, in records of one stripe of
// per_stripe. `planned` only grows; a measurement (taken while launches go on)
// replaces everything planned before it began.
struct FillEstimate {
    uint64_t per_stripe = 1;
    bool counts_plan = true;  // memory modes: records per block unknown, only measurements count
    uint64_t planned = 0, planned_at_measure = 0, measured = 0, planned_at_request = 0;

    void plan(uint64_t share) { planned += share; }
    uint64_t estimate() const { return measured + (counts_plan ? planned - planned_at_measure : 0); }
    // Past half a stripe a measurement is asked for at every launch, without
    // waiting; past three quarters the launching thread waits (for a drain, a
    // measurement, or a quiet point of its own). A wait at every launch past
    // half was the suspected cost (not measured) of the ladder's block_starts
    // rows in a timed repetition; the quarter left is the slack for a plan that
    // guessed an SM's share low.
    bool needs_relief() const { return estimate() >= per_stripe / 2; }
    bool must_wait() const { return estimate() >= per_stripe / 4 * 3; }
    // A measurement is asked for every sixteenth of a stripe planned.
    bool measure_due() const { return planned - planned_at_request >= std::max<uint64_t>(per_stripe / 16, 1); }
    void requested() { planned_at_request = planned; }
    // fill: the undrained worst plus the planned share of blocks launched, not yet
    // started, when the counters were read; planned_then: `planned` just before.
    void measured_at(uint64_t fill, uint64_t planned_then) {
        if (planned_then < planned_at_measure) return;  // an older measurement, finished late
        measured = fill;
        planned_at_measure = planned_then;
    }
};

}  // namespace gpuobs
