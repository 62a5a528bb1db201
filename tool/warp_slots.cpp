#include "warp_slots.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstdlib>
#include <tuple>

namespace gpuobs {
namespace {

struct BlockKey {
    uint64_t grid;
    uint32_t x;
    uint32_t yz;
    bool operator<(const BlockKey& o) const { return std::tie(grid, x, yz) < std::tie(o.grid, o.x, o.yz); }
};

BlockKey key_of(uint64_t grid, uint32_t x, uint16_t y, uint16_t z) {
    return {grid, x, (uint32_t)y | (uint32_t)z << 16};
}

uint64_t distance(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

// Events [e0, e1) against arrivals [a0, a1); returns the arrivals left unmatched.
uint64_t fold_range(std::vector<gpuobs_event>& events, size_t e0, size_t e1, const gpuobs_warp_arrival* arrivals,
                    size_t a0, size_t a1) {
    uint64_t unmatched = 0;
    // Block events sorted by (grid, block, start): an arrival finds its block by
    // binary search, without a hash table of millions of entries.
    std::vector<std::pair<BlockKey, uint32_t>> blocks;
    blocks.reserve(e1 - e0);
    for (size_t i = e0; i < e1; ++i) {
        const gpuobs_event& e = events[i];
        if (e.kind != GPUOBS_EVENT_BLOCK) continue;
        blocks.push_back({key_of(e.grid_id, e.block_x, e.block_y, e.block_z), (uint32_t)i});
    }
    std::sort(blocks.begin(), blocks.end(), [&](const auto& a, const auto& b) {
        if (a.first < b.first || b.first < a.first) return a.first < b.first;
        return events[a.second].time_start < events[b.second].time_start;
    });
    for (size_t i = a0; i < a1; ++i) {
        const gpuobs_warp_arrival& a = arrivals[i];
        if (a.kind == 0) {
            ++unmatched;
            continue;
        }
        const BlockKey key = key_of(a.grid_id, a.block_x, a.block_y, a.block_z);
        // Among the block's events (several when a graph replayed twice in the
        // window), the one whose start is nearest the warp's own.
        auto lo = std::lower_bound(blocks.begin(), blocks.end(), key,
                                   [](const auto& b, const BlockKey& k) { return b.first < k; });
        auto hi = std::upper_bound(lo, blocks.end(), key, [](const BlockKey& k, const auto& b) { return k < b.first; });
        auto at = std::lower_bound(lo, hi, a.time,
                                   [&](const auto& b, uint64_t t) { return events[b.second].time_start < t; });
        auto best = blocks.end();
        if (at != hi) best = at;
        if (at != lo && (best == blocks.end() || distance(events[(at - 1)->second].time_start, a.time) <
                                                     distance(events[best->second].time_start, a.time)))
            best = at - 1;
        if (best == blocks.end()) {
            ++unmatched;
            continue;
        }
        gpuobs_event& e = events[best->second];
        if (a.warp_slot < 64)
            e.address |= 1ull << a.warp_slot;
        else
            e.flags |= GPUOBS_BLOCK_SLOTS_INCOMPLETE;
    }
    for (const auto& b : blocks) {
        gpuobs_event& e = events[b.second];
        const int warps = (e.thread_index + 31) / 32;
        if (__builtin_popcountll(e.address) < warps) e.flags |= GPUOBS_BLOCK_SLOTS_INCOMPLETE;
    }
    return unmatched;
}

}  // namespace

void fold_warp_arrivals(std::vector<gpuobs_event>& events, const std::vector<gpuobs_warp_arrival>& arrivals,
                        gpuobs_slots_info* info) {
    info->unmatched_arrivals += fold_range(events, 0, events.size(), arrivals.data(), 0, arrivals.size());
}

void fold_warp_arrivals(std::vector<gpuobs_event>& events, const std::vector<size_t>& event_stripes,
                        const std::vector<gpuobs_warp_arrival>& arrivals, const std::vector<size_t>& arrival_stripes,
                        gpuobs_slots_info* info, unsigned threads) {
    const size_t stripes = std::min(event_stripes.size(), arrival_stripes.size());
    if (stripes < 2) return fold_warp_arrivals(events, arrivals, info);
    const size_t n = stripes - 1;
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> unmatched{0};
    auto work = [&] {
        for (size_t s; (s = next.fetch_add(1)) < n;)
            unmatched += fold_range(events, event_stripes[s], event_stripes[s + 1], arrivals.data(), arrival_stripes[s],
                                    arrival_stripes[s + 1]);
    };
    std::vector<std::thread> helpers;
    try {
        for (unsigned t = 1; t < std::max(threads, 1u); ++t) helpers.emplace_back(work);
    } catch (const std::exception&) {
        // fewer threads: the rest is folded here
    }
    work();
    for (std::thread& t : helpers) t.join();
    info->unmatched_arrivals += unmatched.load();
}

}  // namespace gpuobs
