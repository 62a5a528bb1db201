/* The windowed reader's index figures of a run of events, in one pass over them
 * (recording_file/event_index.py loads it; windows.py's numpy code computes the same
 * figures where it cannot be built). The layout is the schema header's. */
#include <stddef.h>
#include <stdint.h>

#include "gpuobs_schema.h"

enum { FIG_MIN_START, FIG_MAX_START, FIG_MAX_END, FIG_MAX_TIME, FIG_MAX_SLOT, FIG_MAX_SM, FIG_COUNT };

/* figures[FIG_COUNT]: least start, greatest start, greatest max(end, start), greatest of
 * start and end, greatest function slot, greatest SM id (start or end), updated in place.
 * kinds[256]: events per kind, added to. slots[slot_limit + 1]: set where a slot is seen.
 * zones[4][zone_count]: per zone of zone_rows events of the chunk (events ev[0] is row
 * first_row of it), least and greatest start and grid id, updated in place. */
void gpuobs_index_events(const gpuobs_event* ev, size_t n, size_t first_row, size_t zone_rows, size_t zone_count,
                         uint64_t* figures, int64_t* kinds, uint8_t* slots, uint32_t slot_limit, uint64_t* zones) {
    uint64_t min_start = figures[FIG_MIN_START], max_start = figures[FIG_MAX_START];
    uint64_t max_end = figures[FIG_MAX_END], max_time = figures[FIG_MAX_TIME];
    uint64_t max_slot = figures[FIG_MAX_SLOT], max_sm = figures[FIG_MAX_SM];
    uint64_t *zone_min_start = zones, *zone_max_start = zones + zone_count;
    uint64_t *zone_min_grid = zones + 2 * zone_count, *zone_max_grid = zones + 3 * zone_count;
    for (size_t i = 0; i < n; i++) {
        const gpuobs_event* e = &ev[i];
        uint64_t start = e->time_start, end = e->time_end, grid = e->grid_id;
        if (start < min_start) min_start = start;
        if (start > max_start) max_start = start;
        uint64_t last = end > start ? end : start;
        if (last > max_end) max_end = last;
        if (last > max_time) max_time = last;
        if (e->function_slot > max_slot) max_slot = e->function_slot;
        if (e->function_slot <= slot_limit) slots[e->function_slot] = 1;
        if (e->sm_id > max_sm) max_sm = e->sm_id;
        if (e->sm_id_end > max_sm) max_sm = e->sm_id_end;
        kinds[e->kind]++;
        size_t z = (first_row + i) / zone_rows;
        if (z < zone_count) {
            if (start < zone_min_start[z]) zone_min_start[z] = start;
            if (start > zone_max_start[z]) zone_max_start[z] = start;
            if (grid < zone_min_grid[z]) zone_min_grid[z] = grid;
            if (grid > zone_max_grid[z]) zone_max_grid[z] = grid;
        }
    }
    figures[FIG_MIN_START] = min_start;
    figures[FIG_MAX_START] = max_start;
    figures[FIG_MAX_END] = max_end;
    figures[FIG_MAX_TIME] = max_time;
    figures[FIG_MAX_SLOT] = max_slot;
    figures[FIG_MAX_SM] = max_sm;
}

/* overlap_bound.py's count of the blocks that touch each time bin, for the BLOCK events
 * of ev[0..n), all of one device (its SMs from row sm_row on): per (SM, bin) row of
 * bins + 1 difference counters, +1 at a block's first bin and -1 after its last. A block
 * runs from its start to its end (its start alone where its end is flagged late_flag);
 * touching blocks do not overlap, so its last bin is that of its end less one. */
void gpuobs_overlap_bins(const gpuobs_event* ev, size_t n, uint64_t sm_row, uint64_t bins, uint64_t t0, uint64_t width,
                         uint32_t block_kind, uint32_t late_flag, int64_t* diff) {
    for (size_t i = 0; i < n; i++) {
        const gpuobs_event* e = &ev[i];
        if (e->kind != block_kind) continue;
        uint64_t start = e->time_start, end = e->time_end > start ? e->time_end : start;
        if (e->flags & late_flag) end = start;
        uint64_t last = end > start ? end - 1 : start;
        int64_t* row = diff + (sm_row + e->sm_id) * (bins + 1);
        row[(start - t0) / width]++;
        row[(last - t0) / width + 1]--;
    }
}
