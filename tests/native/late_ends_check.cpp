// tool/late_ends.h over one flush window given as a file: a uint64 count of
// launches, a uint64 count of events, then the gpuobs_launch rows and the
// gpuobs_event rows (tests/test_late_ends.py writes it from a real recording).
// Writes the events back, flagged, to the second file, and prints how many it
// flagged; the third argument is the number of threads.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "late_ends.h"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: late_ends_check IN OUT THREADS\n");
        return 2;
    }
    std::FILE* in = std::fopen(argv[1], "rb");
    uint64_t n_launches = 0, n_events = 0;
    if (in == nullptr || std::fread(&n_launches, 8, 1, in) != 1 || std::fread(&n_events, 8, 1, in) != 1) return 2;
    std::vector<gpuobs_launch> launches(n_launches);
    std::vector<gpuobs_event> events(n_events);
    if (std::fread(launches.data(), sizeof(gpuobs_launch), n_launches, in) != n_launches ||
        std::fread(events.data(), sizeof(gpuobs_event), n_events, in) != n_events)
        return 2;
    std::fclose(in);
    const uint64_t flagged =
        gpuobs::flag_ends_past_next_run(events, gpuobs::rerun_grids(launches), (unsigned)std::atoi(argv[3]));
    std::FILE* out = std::fopen(argv[2], "wb");
    if (out == nullptr || std::fwrite(events.data(), sizeof(gpuobs_event), n_events, out) != n_events) return 2;
    std::fclose(out);
    std::printf("%llu\n", (unsigned long long)flagged);
    return 0;
}
