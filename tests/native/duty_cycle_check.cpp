// tool/duty_cycle.h and settle_off_time (tool/launch_counts.cpp): --duty rounded to
// the powers of two the patches test, and a window's launches that ran wholly in
// the off time settled as unrecorded. Prints "ok" or the first broken promise.
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "duty_cycle.h"
#include "launch_counts.h"

using namespace gpuobs;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
    if (!ok && failures++ == 0) std::printf("FAILED: %s\n", what.c_str());
}

void rounding() {
    struct Case {
        uint64_t on, period;
        uint32_t on_shift, period_shift;
    } cases[] = {
        {50000000, 5000000000ull, 26, 32},  // 67.1 ms of every 4.29 s
        {50000000, 1000000000, 26, 30},     // of every 1.07 s
        {10000000, 50000000, 24, 26},       // 5e7 is nearer 2^26 than 2^25 on a log scale
        {1 << 20, 3 << 20, 20, 22},         // 3 MiB ns: 2^21 * 1.5 is past 2^21 * sqrt(2)
        {1 << 20, 5 << 19, 20, 21},         // 2.5 MiB ns: nearer 2^21 (the on time rounds to 2^20)
        {40000000, 50000000, 26, 27},       // ON rounds up past PERIOD: PERIOD is twice it
        {1, 1000000, 0, 20},
    };
    for (const Case& c : cases) {
        const DutyShifts d = duty_shifts_for(c.on, c.period);
        expect(d.on == c.on_shift && d.period == c.period_shift, std::to_string(c.on) + "/" + std::to_string(c.period) +
                                                                     " -> 2^" + std::to_string(d.on) + "/2^" +
                                                                     std::to_string(d.period));
        expect(d.on_ns() >= c.on, "ON never rounds down");
    }
    expect(duty_shifts_for(0, 0).period == 0 && duty_shifts_for(0, 0).callback_bits() == 0, "no duty, no bits");
    const DutyShifts d = duty_shifts_for(50000000, 5000000000ull);
    expect(d.callback_bits() == ((32ull << 58) | (58ull << 52)), "the bits: 64 - p in 58-63, 64 - p + o in 52-57");
    expect((d.callback_bits() & GPUOBS_CALLBACK_ADDRESS_MASK) == 0, "the bits miss every address bit");
    const uint64_t b = d.callback_bits(), period = 1ull << 32, on = 1ull << 26, base = 0x1234500000000ull;
    expect(duty_on_at(b, base) && duty_on_at(b, base + on - 1), "on from each period's start");
    expect(!duty_on_at(b, base + on) && !duty_on_at(b, base + period - 1), "off from ON to the period's end");
    expect(duty_on_at(b, base + period) && duty_on_at(0, base + on), "on again next period; no bits: always on");
    const DutyShifts long_period = duty_shifts_for(1000000000ull, 60000000000ull);  // 1s/60s: 2^30 of 2^36
    expect(long_period.on == 30 && long_period.period == 36, "a minute's period");
    const uint64_t lb = long_period.callback_bits(), minute = 1ull << 36;
    expect(duty_on_at(lb, 5 * minute + (1ull << 30) - 1) && !duty_on_at(lb, 5 * minute + (1ull << 30)),
           "a long period reads the clock's high word too");
}

gpuobs_launch launch(uint64_t grid_id, uint32_t flags = 0, uint32_t replay = 0) {
    gpuobs_launch l;
    std::memset(&l, 0, sizeof l);
    l.grid_id = grid_id;
    l.grid[0] = 64;
    l.grid[1] = l.grid[2] = 1;
    l.flags = flags;
    l.graph_launch_id = replay;
    return l;
}

gpuobs_launch_count count(uint64_t grid_id, uint64_t n, uint32_t sharing = 1) {
    gpuobs_launch_count c{};
    c.grid_id = grid_id;
    c.count = n;
    c.launches_sharing = sharing;
    return c;
}

void settling() {
    const uint32_t node = GPUOBS_LAUNCH_GRAPH_NODE;
    std::vector<gpuobs_launch> launches = {
        launch(1),                             // off: settled
        launch(2),                             // on: kept
        launch(3, GPUOBS_LAUNCH_RACED_FLUSH),  // 0 so far, but may have run past the cut: kept
        launch(4),                             // crossed an edge: kept, its count partial
        // replays 7 and 8 of one exec, both wholly off: every node settled, two replays
        launch(100, node, 7),
        launch(101, node, 7),
        launch(100, node, 8),
        launch(101, node, 8),
        // replays 9 and 10 of another: node 200 off in both, node 201 on in one of them
        launch(200, node, 9),
        launch(201, node, 9),
        launch(200, node, 10),
        launch(201, node, 10),
    };
    std::vector<gpuobs_launch_count> counts = {
        count(1, 0),      count(2, 64),     count(3, 0),      count(4, 20),
        count(100, 0, 2), count(101, 0, 2), count(200, 0, 2), count(201, 64, 2),
    };
    const std::vector<gpuobs_event> no_records;
    const std::unordered_set<uint32_t> none_lent;
    const uint64_t settled = settle_off_time(&launches, &counts, no_records, none_lent);
    expect(settled == 3, "one launch and two replays settled, got " + std::to_string(settled));
    std::vector<uint64_t> left, counted;
    for (const gpuobs_launch& l : launches) left.push_back(l.grid_id);
    for (const gpuobs_launch_count& c : counts) counted.push_back(c.grid_id);
    expect(left == std::vector<uint64_t>({2, 3, 4, 201, 201}), "the launches left, in their order");
    expect(counted == std::vector<uint64_t>({2, 3, 4, 201}), "the count rows of the launches left");
    std::vector<gpuobs_launch_count> none = {count(2, 64)};
    std::vector<gpuobs_launch> one = {launch(2)};
    expect(settle_off_time(&one, &none, no_records, none_lent) == 0 && one.size() == 1 && none.size() == 1,
           "nothing off: nothing settled");
    // A launch with a record in its window stays, whatever its count says.
    std::vector<gpuobs_launch> with_record = {launch(5)};
    std::vector<gpuobs_launch_count> zero = {count(5, 0)};
    gpuobs_event record;
    std::memset(&record, 0, sizeof record);
    record.grid_id = 5;
    expect(settle_off_time(&with_record, &zero, {record}, none_lent) == 0 && with_record.size() == 1,
           "a launch with a record is never settled");
}

// Replay 1 of a graph node is listed in window 1; replay 2 (the same grid id) is listed
// after window 1's cut but runs, in the on time, before window 1's harvest: window 1's
// count takes both (shared with the later launch) and window 2's reads 0. Replay 2 must
// stay listed: window 1 lent its slot.
void growth_taken_by_an_earlier_window() {
    const uint64_t grid = 77;
    const uint32_t slot = gpuobs_launch_slot(grid);
    std::vector<uint64_t> baseline(GPUOBS_LAUNCH_TABLE_SIZE, 0), harvested(GPUOBS_LAUNCH_TABLE_SIZE, 0);
    harvested[slot] = 128;  // both replays' 64 blocks
    const SlotTotals no_cut;
    uint64_t unattributed = 0;
    std::vector<gpuobs_launch> w1 = {launch(grid, GPUOBS_LAUNCH_GRAPH_NODE, 1)};
    std::vector<gpuobs_launch_count> c1;
    attribute_counts(
        {w1, no_cut, 1, false}, harvested, baseline,
        [&](uint64_t, const std::vector<uint32_t>& asked, std::unordered_set<uint32_t>* out) {
            for (uint32_t s : asked)
                if (s == slot) out->insert(s);
        },
        true, &c1, &unattributed);
    expect(c1.size() == 1 && c1[0].count == 128 && c1[0].launches_sharing == 2, "window 1 shares with the later");
    const std::unordered_set<uint32_t> lent = slots_lent_to_later(w1, c1, true);
    expect(lent.count(slot) == 1, "window 1 lends its slot");
    std::vector<gpuobs_launch> w2 = {launch(grid, GPUOBS_LAUNCH_GRAPH_NODE, 2)};
    std::vector<gpuobs_launch_count> c2;
    attribute_counts(
        {w2, no_cut, 2, false}, harvested, baseline,
        [](uint64_t, const std::vector<uint32_t>&, std::unordered_set<uint32_t>*) {}, true, &c2, &unattributed);
    expect(c2.size() == 1 && c2[0].count == 0, "window 2 reads 0 (the case)");
    expect(settle_off_time(&w2, &c2, {}, lent) == 0 && w2.size() == 1, "replay 2 stays listed");
    std::vector<gpuobs_launch> again = w2;
    std::vector<gpuobs_launch_count> again_counts = c2;
    expect(settle_off_time(&again, &again_counts, {}, {}) == 1, "(without the lent slot it would be settled)");
    // A window cut while kernels ran lends every slot it holds.
    std::vector<gpuobs_launch_count> exact = {count(9, 64)};
    std::vector<gpuobs_launch> nine = {launch(9)};
    expect(slots_lent_to_later(nine, exact, false).count(gpuobs_launch_slot(9)) == 1, "not exact: every slot lent");
    expect(slots_lent_to_later(nine, exact, true).empty(), "exact and unshared: none lent");
}

}  // namespace

int main() {
    rounding();
    settling();
    growth_taken_by_an_earlier_window();
    if (failures == 0) std::printf("ok\n");
    return failures == 0 ? 0 : 1;
}
