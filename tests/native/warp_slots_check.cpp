// Drives tool/warp_slots.cpp's fold on hand-built windows; exits non-zero with
// the failing check on stderr. Run by tests/test_warp_slots_fold.py.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "warp_slots.h"

namespace {

int failures = 0;
#define EXPECT(c)                                                \
    do {                                                         \
        if (!(c)) {                                              \
            std::fprintf(stderr, "line %d: %s\n", __LINE__, #c); \
            ++failures;                                          \
        }                                                        \
    } while (0)

gpuobs_event block(uint64_t grid, uint32_t x, uint64_t start, uint16_t threads, uint32_t leader_slot) {
    gpuobs_event e;
    std::memset(&e, 0, sizeof e);
    e.kind = GPUOBS_EVENT_BLOCK;
    e.grid_id = grid;
    e.block_x = x;
    e.time_start = start;
    e.thread_index = threads;
    e.address = 1ull << leader_slot;
    return e;
}

gpuobs_warp_arrival arrival(uint64_t grid, uint32_t x, uint64_t time, uint8_t slot, uint8_t kind = 1) {
    gpuobs_warp_arrival a;
    std::memset(&a, 0, sizeof a);
    a.grid_id = grid;
    a.block_x = x;
    a.time = time;
    a.warp_slot = slot;
    a.kind = kind;
    return a;
}

}  // namespace

int main() {
    gpuobs_slots_info info;
    std::memset(&info, 0, sizeof info);
    // Block 0: 3 warps in slots 5, 9, 40 (not consecutive); block 1 of the same
    // grid: 1 warp; block 2: 2 warps with one arrival missing.
    std::vector<gpuobs_event> ev = {block(7, 0, 1000, 96, 5), block(7, 1, 1000, 32, 6), block(7, 2, 1100, 64, 2)};
    // The same grid and block replayed later in the window (a graph replayed twice).
    ev.push_back(block(7, 0, 50000, 96, 11));
    std::vector<gpuobs_warp_arrival> arr = {arrival(7, 0, 1001, 9),   arrival(7, 0, 999, 40), arrival(7, 0, 50003, 12),
                                            arrival(7, 0, 50002, 13), arrival(8, 0, 1000, 3), arrival(7, 3, 1000, 4),
                                            arrival(7, 1, 1000, 1, 0)};
    gpuobs::fold_warp_arrivals(ev, arr, &info);
    EXPECT(ev[0].address == ((1ull << 5) | (1ull << 9) | (1ull << 40)));
    EXPECT((ev[0].flags & GPUOBS_BLOCK_SLOTS_INCOMPLETE) == 0);
    EXPECT(ev[1].address == (1ull << 6));
    EXPECT((ev[1].flags & GPUOBS_BLOCK_SLOTS_INCOMPLETE) == 0);
    EXPECT(ev[2].address == (1ull << 2));
    EXPECT((ev[2].flags & GPUOBS_BLOCK_SLOTS_INCOMPLETE) != 0);
    EXPECT(ev[3].address == ((1ull << 11) | (1ull << 12) | (1ull << 13)));
    EXPECT((ev[3].flags & GPUOBS_BLOCK_SLOTS_INCOMPLETE) == 0);
    // grid 8 and block 3 have no event; the last arrival was never written.
    EXPECT(info.unmatched_arrivals == 3);
    // A slot past 63 cannot be a mask bit: the block is flagged.
    std::vector<gpuobs_event> big = {block(9, 0, 10, 64, 1)};
    gpuobs::fold_warp_arrivals(big, {arrival(9, 0, 10, 70)}, &info);
    EXPECT((big[0].flags & GPUOBS_BLOCK_SLOTS_INCOMPLETE) != 0);
    // Stripe by stripe on 4 threads, the same as the whole window at once: random
    // windows of 16 stripes (SMs), each stripe's blocks and their warps' arrivals
    // together, a grid replayed twice (same ids, later starts) on other SMs, some
    // arrivals unwritten or of no block.
    std::mt19937_64 rng(7);
    for (int round = 0; round < 20; ++round) {
        const size_t stripes = 16;
        std::vector<gpuobs_event> whole;
        std::vector<gpuobs_warp_arrival> arrivals;
        std::vector<size_t> event_starts{0}, arrival_starts{0};
        for (size_t s = 0; s < stripes; ++s) {
            for (int b = 0; b < 200; ++b) {
                const uint64_t grid = 1 + rng() % 3, start = 1000 * (rng() % 2) + rng() % 100000;
                const uint32_t x = (uint32_t)(rng() % 500);
                const uint16_t warps = (uint16_t)(1 + rng() % 6);
                whole.push_back(block(grid, x, start, (uint16_t)(warps * 32), (uint32_t)(rng() % 64)));
                for (uint16_t w = 1; w < warps; ++w) {
                    const uint8_t kind = rng() % 50 == 0 ? 0 : 1;
                    arrivals.push_back(
                        arrival(rng() % 40 == 0 ? 99 : grid, x, start + rng() % 3, (uint8_t)(rng() % 64), kind));
                }
            }
            event_starts.push_back(whole.size());
            arrival_starts.push_back(arrivals.size());
        }
        // Keys must not repeat across stripes for the whole-window fold to agree:
        // give each stripe its own block ids.
        for (size_t s = 0; s < stripes; ++s) {
            for (size_t i = event_starts[s]; i < event_starts[s + 1]; ++i) whole[i].block_x += (uint32_t)(1000 * s);
            for (size_t i = arrival_starts[s]; i < arrival_starts[s + 1]; ++i)
                arrivals[i].block_x += (uint32_t)(1000 * s);
        }
        std::vector<gpuobs_event> striped = whole;
        gpuobs_slots_info a, b;
        std::memset(&a, 0, sizeof a);
        std::memset(&b, 0, sizeof b);
        gpuobs::fold_warp_arrivals(whole, arrivals, &a);
        gpuobs::fold_warp_arrivals(striped, event_starts, arrivals, arrival_starts, &b, 4);
        EXPECT(a.unmatched_arrivals == b.unmatched_arrivals);
        EXPECT(a.unmatched_arrivals > 0);
        for (size_t i = 0; i < whole.size(); ++i)
            EXPECT(whole[i].address == striped[i].address && whole[i].flags == striped[i].flags);
    }
    if (failures == 0) std::puts("ok");
    return failures == 0 ? 0 : 1;
}
