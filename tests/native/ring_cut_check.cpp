// A simulated device against tool/ring_cut.h: claims read a limit the host
// published (sometimes a stale one), take positions from a counter that never
// resets, and write their record unless past that limit (a drop); the host cuts
// windows (reads the counters) and later drains them (reads, zeroes, raises the
// limit). Checked: no claim ever overwrites a record not yet read; every written
// record is read exactly once, in its window; every window's written + dropped
// equals its claims, and its drops among the positions read are exactly the
// unwritten ones. Prints "ok" or the first broken promise.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include "ring_cut.h"

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
            std::vector<uint64_t> ring(per_stripe, kEmpty);  // the position each record holds
            std::vector<uint64_t> published{per_stripe};     // limits the device may read
            uint64_t claimed = 0, dropped = 0;
            uint64_t drained = 0, dropped_seen = 0;
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
                        if (written[p]) return fail("a written record was not there when read", p, seed);
                    } else {
                        if (slot != p) return fail("a record read held another position", p, slot);
                        ++got;
                        ++read_count[p];
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
                    read_count.push_back(0);
                    written.push_back(false);
                    if (p >= seen) {
                        ++dropped;
                        continue;
                    }
                    uint64_t& slot = ring[p & (per_stripe - 1)];
                    if (slot != kEmpty) return fail("a claim overwrote a record not yet read", p, slot);
                    slot = p;
                    written[p] = true;
                } else if (r < claim_p + (1 - claim_p) / 2) {
                    cuts.emplace_back(claimed, dropped);
                } else if (!cuts.empty()) {
                    if (drain()) return 1;
                }
            }
            cuts.emplace_back(claimed, dropped);
            if (drain()) return 1;
            for (uint64_t p = 0; p < claimed; ++p)
                if (read_count[p] != (written[p] ? 1 : 0))
                    return fail("a record was read a wrong number of times", p, seed);
        }
    }
    std::printf("ok\n");
    return 0;
}
