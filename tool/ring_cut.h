// How one stripe of a device ring is drained at a cut (the ring is described at
// gpuobs_stripe in the schema): which positions are read, what the window
// counts, and where the stripe's limit goes next. Plain arithmetic, so a host
// test can check it against a simulated device (tests/native/ring_cut_check.cpp).
#pragma once
#include <algorithm>
#include <cstdint>

namespace gpuobs {

struct RingCut {
    uint64_t from = 0, to = 0;    // positions read: [from, to)
    uint64_t cut = 0;             // positions below this belong to the window
    uint64_t attempted = 0;       // the window's claims: [from, cut)
    uint64_t dropped = 0;         // of those, dropped (past the limit their claim read)
    uint64_t dropped_inside = 0;  // drops among [from, to): claims that read an older, lower limit (never written)
    uint64_t next_limit = 0;      // one lap past the cut: every position below it is then free
};

// The device's limit for a stripe drained up to `drained`: one lap past it, so
// every position below the limit has a free record.
inline uint64_t ring_limit(uint64_t drained, uint64_t per_stripe) { return drained + per_stripe; }

// A stripe's claim count from the device's counter. The block entries claim on
// its low 32 bits only (gpuobs_patches.cu, claim_low), so their count is the one
// at or above `drained` (a position already drained: never past the count, and
// less than 2^32 below it) with the counter's low bits. The memory patch claims
// with 64-bit atomics: its counter is the count, and inside one long kernel it can
// run more than 2^32 past `drained`, so it is never widened.
inline uint64_t claims_from_counter(uint64_t device_counter, uint64_t drained, bool low_half_only) {
    if (!low_half_only) return device_counter;
    return drained + (uint32_t)((uint32_t)device_counter - (uint32_t)drained);
}

// drained: the first position not yet read (the limit last given to the device
// is ring_limit of it); claimed, dropped: the stripe's counters read at the cut;
// dropped_seen: the drops counted by earlier windows. Positions at or past the
// limit were all dropped (no claim read a higher one), so only those below it are read.
inline RingCut plan_ring_cut(uint64_t drained, uint64_t claimed, uint64_t dropped, uint64_t dropped_seen,
                             uint64_t per_stripe) {
    const uint64_t limit = ring_limit(drained, per_stripe);
    RingCut c;
    c.from = drained;
    c.cut = std::max(claimed, drained);
    c.to = std::min(c.cut, limit);
    c.attempted = c.cut - c.from;
    c.dropped = dropped > dropped_seen ? dropped - dropped_seen : 0;
    const uint64_t past_limit = c.cut - c.to;
    c.dropped_inside = c.dropped > past_limit ? c.dropped - past_limit : 0;
    c.next_limit = ring_limit(c.cut, per_stripe);
    return c;
}

// Calls f(record, count) for the records holding positions [from, to) of a ring
// of per_stripe records (a power of two): at most two runs.
template <typename F>
void for_each_run(uint64_t from, uint64_t to, uint64_t per_stripe, F f) {
    while (from < to) {
        const uint64_t at = from & (per_stripe - 1), n = std::min(to - from, per_stripe - at);
        f(at, n);
        from += n;
    }
}

}  // namespace gpuobs
