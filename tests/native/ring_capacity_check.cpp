// tool/ring_capacity.h for `--capacity N` over S rings: prints one line per case read
// from stdin ("N S" per line): "N S per_ring kept". The test checks every kept total
// is at least N and under twice N (one power of two per ring, rounded up), and that
// exporter/gpuobs/analysis/ring_capacity.py says the same numbers.
#include <cstdint>
#include <cstdio>

#include "ring_capacity.h"

int main() {
    unsigned long long asked = 0;
    unsigned stripes = 0;
    while (std::scanf("%llu %u", &asked, &stripes) == 2) {
        const uint64_t per = gpuobs::stripe_capacity_asked(asked, stripes);
        std::printf("%llu %u %llu %llu\n", asked, stripes, (unsigned long long)per,
                    (unsigned long long)(per * (stripes ? stripes : 1)));
    }
    return 0;
}
