// A simulated device against tool/ring_cut.h: claims read a limit the host
// published (sometimes a stale one), take positions from a counter that never
// resets, and write their record unless past that limit (a drop); the host cuts
// windows (reads the counters) and later drains them (reads, zeroes, raises the
// limit). The device counts on 32 bits, as the block entries do, from a start
// just below 2^32, so every run wraps it; the host widens it (claims_from_counter).
// Then a memory mode's 64-bit counter more than 2^32 past the last drain: read whole.
// Checked: no claim ever overwrites a record not yet read; every written
// record is read exactly once, in its window; every window's written + dropped
// equals its claims, and its drops among the positions read are exactly the
// unwritten ones. Prints "ok" or the first broken promise.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include "ring_cut.h"

using gpuobs::claims_from_counter;
using gpuobs::plan_ring_cut;
using gpuobs::RingCut;

namespace {

int fail(const char* what, uint64_t a, uint64_t b) {
    std::printf("%s (%llu, %llu)\n", what, (unsigned long long)a, (unsigned long long)b);
    return 1;
}

}  // namespace

int main() {
    for (uint64_t per_stripe : {1ull, 4ull, 16ull, 64ull}) {
        for (unsigned seed = 1; seed <= 40; ++seed) {
            std::mt19937_64 rng(seed * 7919 + per_stripe);
            const uint64_t kEmpty = ~0ull;
            const uint64_t origin = (1ull << 32) - 1500 - seed * 17;  // positions start here: the counter wraps
            std::vector<uint64_t> ring(per_stripe, kEmpty);           // the position each record holds
            std::vector<uint64_t> published{origin + per_stripe};     // limits the device may read
            uint64_t claimed = origin, dropped = 0;                   // the truth, 64-bit
            uint32_t device_counter = (uint32_t)origin;               // what the device keeps
            uint64_t drained = origin, dropped_seen = 0;
            std::vector<int> read_count;                     // per position
            std::vector<bool> written;                       // per position
            std::deque<std::pair<uint64_t, uint64_t>> cuts;  // (claimed, dropped) read at each cut
            const double claim_p = 0.6 + 0.35 * (seed % 4) / 3.0;
            auto drain = [&]() -> int {
                // Windows cut while a drain ran are drained together: the last cut counts.
                const auto [c_claimed, c_dropped] = cuts.back();
                cuts.clear();
                const RingCut c = plan_ring_cut(drained, c_claimed, c_dropped, dropped_seen, per_stripe);
                uint64_t got = 0, empty = 0;
                for (uint64_t p = c.from; p < c.to; ++p) {
                    uint64_t& slot = ring[p & (per_stripe - 1)];
                    if (slot == kEmpty) {
                        ++empty;
                        if (written[p - origin]) return fail("a written record was not there when read", p, seed);
                    } else {
                        if (slot != p) return fail("a record read held another position", p, slot);
                        ++got;
                        ++read_count[p - origin];
                    }
                    slot = kEmpty;  // zeroed
                }
                if (got + c.dropped != c.attempted) return fail("written + dropped != attempted", got, c.attempted);
                if (empty != c.dropped_inside) return fail("unwritten positions read != drops inside", empty, seed);
                drained = c.cut;
                dropped_seen = c_dropped;
                published.push_back(c.next_limit);
                return 0;
            };
            for (int step = 0; step < 4000; ++step) {
                const double r = std::uniform_real_distribution<double>(0, 1)(rng);
                if (r < claim_p) {
                    // A claim: its limit may be any of the last three published.
                    const size_t n = published.size();
                    const size_t k = n - 1 - std::min<size_t>(n - 1, rng() % 3);
                    const uint64_t seen = published[k];
                    const uint64_t p = claimed++;
                    const uint32_t i = device_counter++;
                    read_count.push_back(0);
                    written.push_back(false);
                    // The device's test, on low halves (gpuobs_patches.cu: claim_low).
                    const bool past_limit = (int32_t)(i - (uint32_t)seen) >= 0;
                    if (past_limit != (p >= seen)) return fail("the 32-bit limit test disagrees", p, seen);
                    if (past_limit) {
                        ++dropped;
                        continue;
                    }
                    uint64_t& slot = ring[p & (per_stripe - 1)];
                    if (slot != kEmpty) return fail("a claim overwrote a record not yet read", p, slot);
                    slot = p;
                    written[p - origin] = true;
                } else if (r < claim_p + (1 - claim_p) / 2) {
                    const uint64_t seen = claims_from_counter(device_counter, drained, true);
                    if (seen != claimed) return fail("the widened counter is not the count", seen, claimed);
                    cuts.emplace_back(seen, dropped);
                } else if (!cuts.empty()) {
                    if (drain()) return 1;
                }
            }
            cuts.emplace_back(claims_from_counter(device_counter, drained, true), dropped);
            if (drain()) return 1;
            if (claimed < (1ull << 32) + 100) return fail("the run did not wrap the device counter", claimed, seed);
            for (uint64_t p = origin; p < claimed; ++p)
                if (read_count[p - origin] != (written[p - origin] ? 1 : 0))
                    return fail("a record was read a wrong number of times", p, seed);
        }
    }
    // Memory modes claim with 64-bit atomics: one long kernel can claim more than
    // 2^32 past the last drain (the ring full, every later claim dropped). Its count
    // comes back whole, and the next limit lies past it, so later claims are written.
    {
        const uint64_t per_stripe = 64, drained = 1000, dropped = (5ull << 32) + 3;
        const uint64_t counter = drained + per_stripe + dropped;
        const RingCut c = plan_ring_cut(drained, claims_from_counter(counter, drained, false), dropped, 0, per_stripe);
        if (c.attempted != per_stripe + dropped || c.dropped != dropped)
            return fail("a 64-bit count was cut short", c.attempted, per_stripe + dropped);
        if (c.next_limit <= counter) return fail("the next limit lies below the device's count", c.next_limit, counter);
    }
    std::printf("ok\n");
    return 0;
}
