// The block table's slot mapping (gpuobs_block_table_slot in the schema), checked
// for what block_trace relies on; exits non-zero with the failing check on stderr.
// Run by tests/test_block_table_slots.py.
#include <cstdio>
#include <vector>

#include "gpuobs_schema.h"

int main() {
    int failures = 0;
    // 64 consecutive grid ids (from any start, device-launched ones included),
    // each with up to TABLE / 64 blocks in flight: every block its own slot.
    const uint64_t per_grid = GPUOBS_BLOCK_TABLE_SIZE / 64;
    for (uint64_t first : {1ull, 77ull, 4095ull, 0xfffffffffffffff0ull}) {
        std::vector<int> seen(GPUOBS_BLOCK_TABLE_SIZE, 0);
        for (uint64_t g = first; g != first + 64; ++g)
            for (uint64_t b = 0; b < per_grid; ++b)
                if (seen[gpuobs_block_table_slot(g, b)]++) {
                    std::fprintf(stderr, "grid %llu block %llu shares a slot\n", (unsigned long long)g,
                                 (unsigned long long)b);
                    ++failures;
                    break;
                }
    }
    // One grid: any TABLE consecutive blocks (a big grid's blocks in flight) apart.
    std::vector<int> seen(GPUOBS_BLOCK_TABLE_SIZE, 0);
    for (uint64_t b = 100000; b < 100000 + GPUOBS_BLOCK_TABLE_SIZE; ++b)
        if (seen[gpuobs_block_table_slot(9, b)]++) {
            std::fprintf(stderr, "block %llu of one grid shares a slot\n", (unsigned long long)b);
            ++failures;
            break;
        }
    if (failures == 0) std::puts("ok");
    return failures == 0 ? 0 : 1;
}
