// block_starts: the warp arrivals of one flush window folded into their blocks'
// events, as the slot mask the host bounds block ends with (see the schema).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpuobs_schema.h"

namespace gpuobs {

// Sets each arrival's slot bit in its block's event (the event of the same grid
// and block index whose start is nearest the arrival: a graph replayed twice in
// one window repeats grid ids) and flags GPUOBS_BLOCK_SLOTS_INCOMPLETE on every
// block event with fewer slots than warps. Arrivals not yet written (kind 0)
// and arrivals with no event are counted in info->unmatched_arrivals.
void fold_warp_arrivals(std::vector<gpuobs_event>& events, const std::vector<gpuobs_warp_arrival>& arrivals,
                        gpuobs_slots_info* info);
// The same, stripe by stripe: a warp runs on its block's SM, so its arrival is in
// the same stripe as its block's event. event_stripes and arrival_stripes hold each
// stripe's first position (stripes + 1 of them). Stripes are folded on up to
// `threads` threads, each over data that fits its cache.
void fold_warp_arrivals(std::vector<gpuobs_event>& events, const std::vector<size_t>& event_stripes,
                        const std::vector<gpuobs_warp_arrival>& arrivals, const std::vector<size_t>& arrival_stripes,
                        gpuobs_slots_info* info, unsigned threads);

}  // namespace gpuobs
