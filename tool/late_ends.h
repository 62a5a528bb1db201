// Block ends stamped by the same block's next run. block_trace finds a running
// block's event through a table keyed by (grid id, block index), which the
// block's leader publishes at its start. Graph replays of one kernel node, and
// the runs of a kernel inside a conditional body, share one grid id, so a warp of
// run k+1 that exits before its leader publishes finds run k's event and stamps
// its end. Where those extra exits overshoot the block's threads the drain flags
// the event by its exit count; where the block's own early exits left as many
// out, the count balances and nothing told. Runs of one kernel node never overlap,
// so an end later than the start of the same block's next run is such a stamp:
// flagged here as well (seen on the H100: a WHILE body's last run stamped 36 ms
// late by the next replay, tests/data/while_graph_block_trace.gpuobs). Plain
// arithmetic, checked by tests/native/late_ends_check.cpp.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "gpuobs_schema.h"

namespace gpuobs {

// The grid ids whose blocks may run more than once in a window: those of two or
// more of its launches (graph replays), and those of kernels inside conditional
// bodies (listed once per replay, run as often as the device decides). Sorted.
inline std::vector<uint64_t> rerun_grids(const std::vector<gpuobs_launch>& launches) {
    std::vector<uint64_t> all, out;
    all.reserve(launches.size());
    for (const gpuobs_launch& l : launches) all.push_back(l.grid_id);
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i + 1 < all.size(); ++i)
        if (all[i] == all[i + 1] && (out.empty() || out.back() != all[i])) out.push_back(all[i]);
    for (const gpuobs_launch& l : launches)
        if (l.flags & GPUOBS_LAUNCH_CONDITIONAL_BODY) out.push_back(l.grid_id);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

// Flags GPUOBS_BLOCK_END_UNCONFIRMED on the ended block events of `grids` (sorted)
// whose end is later than the start of the same block's next run among `events`;
// returns how many it flagged that were not flagged already. The events are put in
// buckets by grid id, and the buckets sorted (block, start) on up to `threads`
// threads: a window of a server's graph replays holds millions (4M took 0.8 s on
// one core of the 2-core VM in one sort).
inline uint64_t flag_ends_past_next_run(std::vector<gpuobs_event>& events, const std::vector<uint64_t>& grids,
                                        unsigned threads = 1) {
    if (grids.empty()) return 0;
    struct Run {
        uint64_t block, start;
        size_t index;
    };
    const auto grid_of = [&](const gpuobs_event& e) -> size_t {
        if (e.kind != GPUOBS_EVENT_BLOCK || e.time_end == 0) return grids.size();
        const auto at = std::lower_bound(grids.begin(), grids.end(), e.grid_id);
        return at != grids.end() && *at == e.grid_id ? (size_t)(at - grids.begin()) : grids.size();
    };
    std::vector<size_t> first(grids.size() + 2, 0);
    for (const gpuobs_event& e : events) {
        const size_t g = grid_of(e);
        if (g < grids.size()) ++first[g + 2];
    }
    for (size_t g = 2; g < first.size(); ++g) first[g] += first[g - 1];  // first[g + 1]: where bucket g starts
    std::vector<Run> runs(first[grids.size() + 1]);
    for (size_t i = 0; i < events.size(); ++i) {
        const gpuobs_event& e = events[i];
        const size_t g = grid_of(e);
        if (g == grids.size()) continue;
        runs[first[g + 1]++] = {(uint64_t)e.block_x | (uint64_t)e.block_y << 32 | (uint64_t)e.block_z << 48,
                                e.time_start, i};
    }
    // first[g] is now where bucket g starts, first[g + 1] where it ends.
    std::atomic<size_t> next_bucket{0};
    std::atomic<uint64_t> flagged{0};
    const auto work = [&] {
        for (size_t g; (g = next_bucket.fetch_add(1)) < grids.size();) {
            const auto lo = runs.begin() + (ptrdiff_t)first[g], hi = runs.begin() + (ptrdiff_t)first[g + 1];
            std::sort(lo, hi, [](const Run& a, const Run& b) {
                return a.block != b.block ? a.block < b.block : a.start < b.start;
            });
            uint64_t mine = 0;
            for (auto run = lo; run != hi && run + 1 != hi; ++run) {
                gpuobs_event& e = events[run->index];
                const Run& next = *(run + 1);
                if (run->block != next.block || e.time_end <= next.start || (e.flags & GPUOBS_BLOCK_END_UNCONFIRMED))
                    continue;
                e.flags |= GPUOBS_BLOCK_END_UNCONFIRMED;
                ++mine;
            }
            flagged += mine;
        }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < std::min<size_t>(threads, grids.size()); ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    return flagged.load();
}

}  // namespace gpuobs
