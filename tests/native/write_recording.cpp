// Writes a recording with the host tool's own writer (tool/recording_file.cpp),
// so CI can check that what the C++ side frames, the Python reader reads.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpuobs_schema.h"
#include "recording_file.h"

// With a second argument, first plants a link named as this process's fallback
// file ("<stem>.<pid>.gpuobs") that points at that path, as an attacker would.
static void plant_link(const std::string& out, const char* target) {
    const size_t dot = out.rfind('.');
    const std::string fallback = out.substr(0, dot) + "." + std::to_string(getpid()) + out.substr(dot);
    if (symlink(target, fallback.c_str()) != 0) std::perror("symlink");
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    if (argc > 2) plant_link(argv[1], argv[2]);
    gpuobs::RecordingFile file;
    std::string error;
    if (!file.open(argv[1], &error)) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 1;
    }
    std::printf("%s\n", file.path().c_str());
    gpuobs_run_info run;
    std::memset(&run, 0, sizeof run);
    run.pid = 99;
    run.mode = GPUOBS_MODE_BLOCK_TRACE;
    const char argv_text[] = "prog\0--flag\0";
    run.argv_len = sizeof argv_text - 1;
    file.write_chunk(GPUOBS_CHUNK_RUN, {{&run, sizeof run}, {argv_text, run.argv_len}});
    gpuobs_function_info fn;
    std::memset(&fn, 0, sizeof fn);
    fn.function_slot = 3;
    const std::string mangled = "_Z6kernelv", demangled = "kernel()";
    fn.mangled_len = mangled.size();
    fn.demangled_len = demangled.size();
    file.write_chunk(GPUOBS_CHUNK_FUNCTION,
                     {{&fn, sizeof fn}, {mangled.data(), mangled.size()}, {demangled.data(), demangled.size()}});
    gpuobs_launch launch;
    std::memset(&launch, 0, sizeof launch);
    launch.launch_id = 1;
    launch.grid_id = 555;
    launch.function_slot = 3;
    launch.grid[0] = 5;
    file.write_chunk(GPUOBS_CHUNK_LAUNCHES, {{&launch, sizeof launch}});
    gpuobs_flush_info flush;
    std::memset(&flush, 0, sizeof flush);
    flush.attempted = flush.recorded = 5;
    gpuobs_launch_count count = {555, 5, 1, 0};
    flush.launch_count_len = 1;
    file.write_chunk(GPUOBS_CHUNK_FLUSH, {{&flush, sizeof flush}, {&count, sizeof count}});
    std::vector<gpuobs_event> events(5);
    for (unsigned i = 0; i < events.size(); ++i) {
        std::memset(&events[i], 0, sizeof events[i]);
        events[i].time_start = 1000 + i;
        events[i].time_end = 2000 + i;
        events[i].grid_id = 555;
        events[i].function_slot = 3;
        events[i].block_x = i;
        events[i].sm_id = events[i].sm_id_end = (uint16_t)(i % 2);
        events[i].kind = GPUOBS_EVENT_BLOCK;
    }
    file.write_events(0, 0, events.data(), (uint32_t)events.size());
    gpuobs_end_info end;
    std::memset(&end, 0, sizeof end);
    end.events = 5;
    file.write_chunk(GPUOBS_CHUNK_END, {{&end, sizeof end}});
    file.close();
    return 0;
}
