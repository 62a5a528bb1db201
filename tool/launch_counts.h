// Which launch each launch-counter slot's growth belongs to, at a drain
// (Drainer::drain_window). A slot is a grid id's low bits, and a graph's kernel node
// keeps its grid id on every replay of its exec: so when a replay runs between a
// window's cut and its drain's harvest, the harvest holds blocks of both replays in
// the one slot. (The vLLM-shaped server: 80 of 303 launches counted twice their grid,
// the next replay's none.) Two things keep counts exact:
//   - a quiet cut whose window holds graph-node launches reads those slots' totals at
//     the cut, before the program launches again (cut_totals); the drain takes them
//     instead of its own harvest's, and the growth after them is the next window's;
//   - every launch listed gets a number (LaunchLog), and a slot's last one is kept, so
//     the drain knows exactly which slots a launch listed after its window's cut may
//     have grown (the queue and the pending launches left out those between a cut
//     and its place in the queue: counts of no listed launch).
// Where neither can tell (a cut whose slot totals could not be read, a flush that was
// not at a quiet point), the count is marked shared with the later launch (its
// launches_sharing one more), never given to one launch whole.
#pragma once
#include <cstdint>
#include <functional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpuobs_schema.h"

namespace gpuobs {

// slot -> total at a cut, sorted by slot.
using SlotTotals = std::vector<std::pair<uint32_t, uint64_t>>;

// What a drain knows of its window (FlushWindow's parts the counts need).
struct CountedWindow {
    const std::vector<gpuobs_launch>& launches;
    const SlotTotals& cut_totals;  // read at the cut (a quiet one's graph-node slots)
    uint64_t launches_end;         // the number of its last launch (LaunchLog)
    bool snapshot;                 // harvested by an in-stream snapshot behind its launches
};
// Of the slots asked, those where a launch numbered past the given one has been listed
// (LaunchLog::listed_after).
using ListedAfter = std::function<void(uint64_t, const std::vector<uint32_t>&, std::unordered_set<uint32_t>*)>;

// The counts of a window from `harvested` (one total per slot), each slot's growth
// since `baseline` (which moves on); growth no launch of the window or a later one
// owns is added to `unattributed`. `later_possible`: whether launches listed after the
// window's cut may have run before the harvest (false for a flush that was not at a
// quiet point, whose remaining growth is not waited for, as before).
void attribute_counts(const CountedWindow& w, const std::vector<uint64_t>& harvested, std::vector<uint64_t>& baseline,
                      const ListedAfter& listed_after, bool later_possible, std::vector<gpuobs_launch_count>* out,
                      uint64_t* unattributed);

// A duty cycle kept on the device (duty_cycle.h) counts nothing outside its on
// time, so a launch that ran wholly there has a count of 0: it is settled as a
// launch outside a window is, taken out of the window's launches (its count row
// with it) and counted as unrecorded, a graph replay once, where none of its kernel
// nodes is left. A count of 0 is not always the launch's whole story, so these stay:
//   - a launch flagged as racing a flush (its blocks may fall in the next window);
//   - a launch whose grid id has a record in this window (`records`: a slot's
//     growth can have gone to an earlier window, see attribute_counts);
//   - a launch in a slot an earlier window may have taken this window's growth of
//     (`lent`: slots_lent_to_later).
// (A launch that counts 0 for another reason, a function whose code could not be
// patched, a memory-mode launch with no global access, is settled the same way.)
// Returns the launches (replays once) settled.
uint64_t settle_off_time(std::vector<gpuobs_launch>* launches, std::vector<gpuobs_launch_count>* counts,
                         const std::vector<gpuobs_event>& records, const std::unordered_set<uint32_t>& lent);

// The slots of a drained window whose total may hold growth of a launch listed later
// (so that launch's own window may read 0 for it): every slot of a window whose
// counts are not exact at its cut (`exact` false: cut while kernels ran, not at an
// in-stream snapshot), else the slots counted as shared with a later launch.
std::unordered_set<uint32_t> slots_lent_to_later(const std::vector<gpuobs_launch>& launches,
                                                 const std::vector<gpuobs_launch_count>& counts, bool exact);

// Whether one drain may take a queued window together with the one after it (both
// windows' launches, the later one's cut). Only quiet windows merge: the last one's
// quiet time then bounds every block of them all (block_starts), and a window cut
// while kernels ran keeps its own. A window cut at an in-stream snapshot never merges
// into a later one: its counts are the snapshot's totals, read behind its launches,
// and merged, the later window's live harvest would count its graph-node slots with
// whatever the next replay of the same nodes had added by the drain (a serving loop
// with a synchronisation per step, H100: 22 of 6,589 flushes counted part of the next
// replay, its window then that much short).
inline bool merges_with_next(bool quiet, bool at_snapshot, bool next_quiet) {
    return quiet && !at_snapshot && next_quiet;
}

// Quiet windows merged into one drain: the later window's totals, and the earlier
// one's where the later window (its own launches) holds no launch in that slot.
void merge_cut_totals(const SlotTotals& earlier, const std::vector<gpuobs_launch>& later_launches, SlotTotals* into);

}  // namespace gpuobs
