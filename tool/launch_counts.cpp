// Launch counts at a drain (launch_counts.h says why each rule is there).
#include "launch_counts.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace gpuobs {

void attribute_counts(const CountedWindow& w, const std::vector<uint64_t>& harvested, std::vector<uint64_t>& baseline,
                      const ListedAfter& listed_after, bool later_possible, std::vector<gpuobs_launch_count>* out,
                      uint64_t* unattributed) {
    std::map<uint32_t, std::map<uint64_t, uint32_t>> by_slot;  // slot -> grid id -> launches
    for (const gpuobs_launch& l : w.launches) ++by_slot[gpuobs_launch_slot(l.grid_id)][l.grid_id];
    std::unordered_map<uint32_t, uint64_t> at_cut(w.cut_totals.begin(), w.cut_totals.end());
    // The slots a later launch may have grown: those whose growth is not all this window's.
    std::unordered_set<uint32_t> later;
    if (later_possible) {
        std::vector<uint32_t> asked;
        for (uint32_t s = 0; s < GPUOBS_LAUNCH_TABLE_SIZE; ++s) {
            const bool mine = by_slot.count(s) != 0;
            if ((mine && !at_cut.count(s)) || (!mine && harvested[s] > baseline[s])) asked.push_back(s);
        }
        listed_after(w.launches_end, asked, &later);
    }
    for (uint32_t s = 0; s < GPUOBS_LAUNCH_TABLE_SIZE; ++s) {
        auto it = by_slot.find(s);
        if (it == by_slot.end()) {
            // An in-stream snapshot's totals can be older than the last live harvest (its
            // kernel ran before that drain): never less than nothing.
            const uint64_t grown = harvested[s] > baseline[s] ? harvested[s] - baseline[s] : 0;
            if (grown == 0 || later.count(s)) continue;  // a later window's launch owns it
            *unattributed += grown;
            baseline[s] = harvested[s];
            continue;
        }
        auto cut = at_cut.find(s);
        // Read at the cut: the growth after it is a later launch's, left for its window.
        const uint64_t upto = cut != at_cut.end() ? std::min(cut->second, harvested[s]) : harvested[s];
        const uint64_t total = upto - std::min(upto, baseline[s]);
        baseline[s] = std::max(baseline[s], upto);
        uint32_t sharing = 0;
        for (const auto& g : it->second) sharing += g.second;
        // A snapshot's totals were read on the stream before any later launch ran.
        if (cut == at_cut.end() && !w.snapshot && later.count(s)) ++sharing;
        for (const auto& g : it->second) {
            gpuobs_launch_count c{};
            c.grid_id = g.first;
            c.count = total;
            c.launches_sharing = sharing;
            out->push_back(c);
        }
    }
}

uint64_t settle_off_time(std::vector<gpuobs_launch>* launches, std::vector<gpuobs_launch_count>* counts,
                         const std::vector<gpuobs_event>& records, const std::unordered_set<uint32_t>& lent) {
    std::unordered_set<uint64_t> uncounted;
    for (const gpuobs_launch_count& c : *counts)
        if (c.count == 0 && !lent.count(gpuobs_launch_slot(c.grid_id))) uncounted.insert(c.grid_id);
    if (uncounted.empty()) return 0;
    for (const gpuobs_event& e : records) uncounted.erase(e.grid_id);  // a record says it ran in an on time
    if (uncounted.empty()) return 0;
    uint64_t settled = 0;
    std::unordered_set<uint32_t> replays_out, replays_left;
    std::unordered_set<uint64_t> grids_left;
    std::vector<gpuobs_launch> kept;
    kept.reserve(launches->size());
    for (const gpuobs_launch& l : *launches) {
        const bool node = (l.flags & GPUOBS_LAUNCH_GRAPH_NODE) != 0;
        if (uncounted.count(l.grid_id) && !(l.flags & GPUOBS_LAUNCH_RACED_FLUSH)) {
            if (node)
                replays_out.insert(l.graph_launch_id);
            else
                ++settled;
            continue;
        }
        if (node) replays_left.insert(l.graph_launch_id);
        grids_left.insert(l.grid_id);
        kept.push_back(l);
    }
    for (uint32_t r : replays_out) settled += replays_left.count(r) ? 0 : 1;
    launches->swap(kept);
    counts->erase(std::remove_if(counts->begin(), counts->end(),
                                 [&](const gpuobs_launch_count& c) { return !grids_left.count(c.grid_id); }),
                  counts->end());
    return settled;
}

std::unordered_set<uint32_t> slots_lent_to_later(const std::vector<gpuobs_launch>& launches,
                                                 const std::vector<gpuobs_launch_count>& counts, bool exact) {
    std::unordered_map<uint32_t, uint32_t> listed;  // slot -> launches of this window in it
    for (const gpuobs_launch& l : launches) ++listed[gpuobs_launch_slot(l.grid_id)];
    std::unordered_set<uint32_t> lent;
    if (!exact)
        for (const auto& slot_listed : listed) lent.insert(slot_listed.first);
    for (const gpuobs_launch_count& c : counts) {
        const uint32_t slot = gpuobs_launch_slot(c.grid_id);
        if (c.launches_sharing > listed[slot]) lent.insert(slot);  // attribute_counts' `later` share
    }
    return lent;
}

void merge_cut_totals(const SlotTotals& earlier, const std::vector<gpuobs_launch>& later_launches, SlotTotals* into) {
    if (earlier.empty()) return;
    std::unordered_set<uint32_t> later_slots;
    for (const gpuobs_launch& l : later_launches) later_slots.insert(gpuobs_launch_slot(l.grid_id));
    // A slot the later window holds is counted to its cut (its own total), or, without
    // one, to the drain's harvest: the earlier total then says nothing more.
    SlotTotals merged = *into;
    for (const auto& st : earlier)
        if (!later_slots.count(st.first)) merged.push_back(st);
    std::sort(merged.begin(), merged.end());
    into->swap(merged);
}

}  // namespace gpuobs
