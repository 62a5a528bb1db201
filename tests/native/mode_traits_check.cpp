// The schema's mode table (enum gpuobs_mode_traits, GPUOBS_MODE_PATCHES) against
// what each mode did before the table: the tests every tool file wrote out by hand,
// and the patch plan's switch. Exits non-zero with the failing check on stderr.
// Run by tests/test_mode_traits.py.
#include <cstdio>
#include <cstring>
#include <string>

#include "gpuobs_schema.h"

namespace {

int failures = 0;
#define EXPECT(c)                                                \
    do {                                                         \
        if (!(c)) {                                              \
            std::fprintf(stderr, "line %d: %s\n", __LINE__, #c); \
            ++failures;                                          \
        }                                                        \
    } while (0)

bool is(uint32_t m, uint32_t a) { return m == a; }

struct Plan {
    const char *entry, *exit, *memory;
};

// The patch plan's switch as it stood (tool/patching.cpp at 8fb1067).
Plan old_plan(uint32_t mode) {
    switch (mode) {
        case GPUOBS_MODE_BLOCK_NOOP: return {"gpuobs_block_noop", nullptr, nullptr};
        case GPUOBS_MODE_BLOCK_COUNTER: return {"gpuobs_block_counter", nullptr, nullptr};
        case GPUOBS_MODE_BLOCK_TRACE: return {"gpuobs_block_trace_enter", "gpuobs_block_trace_exit", nullptr};
        case GPUOBS_MODE_BLOCK_STARTS: return {"gpuobs_block_starts_enter", nullptr, nullptr};
        case GPUOBS_MODE_BLOCK_TRACE_NOOP: return {"gpuobs_block_noop", "gpuobs_block_exit_noop", nullptr};
        case GPUOBS_MODE_MEM_NOOP: return {nullptr, nullptr, "gpuobs_mem_noop"};
        case GPUOBS_MODE_MEM_SAMPLED:
        case GPUOBS_MODE_MEM_FULL: return {nullptr, nullptr, "gpuobs_mem_access"};
        default: return {nullptr, nullptr, nullptr};
    }
}

bool same(const char* a, const char* b) { return (a == nullptr || b == nullptr) ? a == b : std::strcmp(a, b) == 0; }

}  // namespace

int main() {
#define ROW(traits, entry, exit, memory) Plan{entry, exit, memory},
    const Plan rows[] = {GPUOBS_MODE_PATCHES(ROW)};
#undef ROW
    const uint32_t modes = sizeof rows / sizeof rows[0];
    EXPECT(modes == GPUOBS_MODE_BLOCK_STARTS + 1);
    for (uint32_t m = 0; m < modes + 2; ++m) {
        using namespace std;
        // The hand-written tests the table replaced, each as it stood.
        const bool fills = is(m, GPUOBS_MODE_BLOCK_TRACE) || is(m, GPUOBS_MODE_BLOCK_STARTS) ||
                           is(m, GPUOBS_MODE_MEM_SAMPLED) || is(m, GPUOBS_MODE_MEM_FULL);
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_BLOCK_RECORDS | GPUOBS_TRAIT_ACCESS_RECORDS) == fills);
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_CLAIMS_LOW_HALF) ==
               (is(m, GPUOBS_MODE_BLOCK_TRACE) || is(m, GPUOBS_MODE_BLOCK_STARTS)));
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_BLOCK_RECORDS) ==
               (is(m, GPUOBS_MODE_BLOCK_TRACE) || is(m, GPUOBS_MODE_BLOCK_STARTS)));
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_ACCESS_RECORDS) ==
               (is(m, GPUOBS_MODE_MEM_SAMPLED) || is(m, GPUOBS_MODE_MEM_FULL)));
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_WARP_ARRIVALS) == is(m, GPUOBS_MODE_BLOCK_STARTS));
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_BOUNDED_ENDS) == is(m, GPUOBS_MODE_BLOCK_STARTS));
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_EVERY_ACCESS) == is(m, GPUOBS_MODE_MEM_FULL));
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_PATCHES) == (m != GPUOBS_MODE_OFF && m < modes));
        // Counting modes: the patches that call count_for_launch (device_patches/gpuobs_patches.cu).
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_COUNTS) ==
               (is(m, GPUOBS_MODE_BLOCK_COUNTER) || is(m, GPUOBS_MODE_BLOCK_TRACE) || is(m, GPUOBS_MODE_BLOCK_STARTS) ||
                is(m, GPUOBS_MODE_MEM_SAMPLED) || is(m, GPUOBS_MODE_MEM_FULL)));
        const Plan want = old_plan(m);
        const Plan got = m < modes ? rows[m] : Plan{nullptr, nullptr, nullptr};
        EXPECT(same(got.entry, want.entry) && same(got.exit, want.exit) && same(got.memory, want.memory));
        // The modes whose names begin "mem" (what the reports tested): those with a memory patch.
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_MEMORY_PATCH) == (want.memory != nullptr));
        // Measured ends: the modes whose plan has a block_trace exit.
        EXPECT(gpuobs_mode_has(m, GPUOBS_TRAIT_MEASURED_ENDS) == same(want.exit, "gpuobs_block_trace_exit"));
    }
    if (failures == 0) std::puts("ok");
    return failures == 0 ? 0 : 1;
}
