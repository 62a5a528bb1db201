// Drives tool/sample_rule.h against a simulated program that fills the rings at a
// steady rate, as the sampler's thread would (it asks at next_check_ns), and prints
// what was recorded, as JSON, for tests/test_sampler_rule.py.
//   sampler_check RATE_BYTES_PER_S BUDGET BURST DUTY_ON_NS DUTY_PERIOD_NS SECONDS
#include <cstdio>
#include <cstdlib>

#include "sample_rule.h"

int main(int argc, char** argv) {
    if (argc != 7) return 2;
    const double rate = std::atof(argv[1]);
    const uint64_t budget = std::strtoull(argv[2], nullptr, 10), burst = std::strtoull(argv[3], nullptr, 10);
    const uint64_t on = std::strtoull(argv[4], nullptr, 10), period = std::strtoull(argv[5], nullptr, 10);
    const uint64_t end = (uint64_t)(std::atof(argv[6]) * 1e9);
    const uint64_t t0 = 1000000000ull;  // the rule's start, on a clock that does not start at 0
    gpuobs::SampleRule rule(budget, burst, on, period, t0);
    double recorded = 0;
    uint64_t now = t0, open_ns = 0, turns = 0, longest_open = 0, this_open = 0;
    bool open = rule.open_at(now, 0);
    while (now < t0 + end) {
        const uint64_t step = rule.next_check_ns(now, open);
        const uint64_t dt = step < t0 + end - now ? step : t0 + end - now;
        if (open) {  // the program fills the rings while the gate is open
            recorded += rate * (double)dt / 1e9;
            open_ns += dt;
            this_open += dt;
            if (this_open > longest_open) longest_open = this_open;
        }
        now += dt;
        const bool want = rule.open_at(now, (uint64_t)recorded);
        if (want != open) {
            turns += open ? 1 : 0;
            this_open = 0;
            open = want;
        }
    }
    std::printf("{\"recorded\": %.0f, \"open_ns\": %llu, \"closes\": %llu, \"longest_open_ns\": %llu}\n", recorded,
                (unsigned long long)open_ns, (unsigned long long)turns, (unsigned long long)longest_open);
    return 0;
}
