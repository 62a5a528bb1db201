// Writes a recording with the host tool's own writer (tool/recording_file.cpp),
// so CI can check that what the C++ side frames, the Python reader reads.
//   write_recording OUT [LINK_TARGET]: one launch, one flush, five blocks.
//   write_recording --replays N --nodes M [--pack LIBZ] OUT: a graph-replay-shaped run
//     (N replays of M kernel nodes, a flush every 8 replays, one block each), its
//     tables written as the drain writes them, packed by the zlib LIBZ names (as
//     GPUOBS_ZLIB names it to the tool) or, where that cannot be loaded, as they are;
//     prints the bytes its writes said they added.
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

// Deterministic jitter (the same file from the same arguments).
static uint64_t next_random(uint64_t* state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

static int write_replays(const char* out, uint32_t replays, uint32_t nodes, const char* zlib) {
    gpuobs::ChunkPacker packer;
    std::string error;
    if (zlib != nullptr) {
        if (packer.load(zlib, &error))
            std::fprintf(stderr, "packed\n");
        else
            std::fprintf(stderr, "unpacked: %s\n", error.c_str());
    }
    gpuobs::RecordingFile file;
    if (!file.open(out, &error)) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 1;
    }
    if (packer.ready()) file.set_packer(&packer);
    uint64_t written = 0;  // what the writes say they added: the file's size less its header
    gpuobs_run_info run;
    std::memset(&run, 0, sizeof run);
    run.pid = 77;
    run.mode = GPUOBS_MODE_BLOCK_TRACE;
    written += file.write_chunk(GPUOBS_CHUNK_RUN, {{&run, sizeof run}});
    gpuobs_device_info device;
    std::memset(&device, 0, sizeof device);
    device.sm_count = 132;
    device.cc_major = 9;
    std::strcpy(device.name, "NVIDIA H100 80GB HBM3");
    written += file.write_chunk(GPUOBS_CHUNK_DEVICE, {{&device, sizeof device}});
    constexpr uint32_t kFunctions = 24;
    for (uint32_t slot = 0; slot < kFunctions; ++slot) {
        gpuobs_function_info fn;
        std::memset(&fn, 0, sizeof fn);
        fn.function_slot = slot;
        const std::string name = "_Z8kernel" + std::to_string(slot) + "v";
        fn.mangled_len = name.size();
        written += file.write_chunk(GPUOBS_CHUNK_FUNCTION, {{&fn, sizeof fn}, {name.data(), name.size()}});
    }
    const uint64_t device_base = 1732000000000000000ull, host_base = 5000000000000ull;
    gpuobs_clock_sample clock;
    std::memset(&clock, 0, sizeof clock);
    clock.method = 1;
    clock.device_ns = device_base;
    clock.monotonic_before = clock.boottime_before = host_base - 500;
    clock.monotonic_after = clock.boottime_after = host_base + 500;
    clock.realtime_before = 1700000000000000000ull - 500;
    clock.realtime_after = 1700000000000000000ull + 500;
    written += file.write_chunk(GPUOBS_CHUNK_CLOCK, {{&clock, sizeof clock}});
    gpuobs::PackBuffers buffers;
    std::vector<gpuobs_launch> launches;
    std::vector<gpuobs_launch_count> counts;
    std::vector<gpuobs_event> events;
    uint64_t random = 1, launch_id = 1, grid_id = 1000, blocks = 0;
    uint32_t flush_seq = 0;
    for (uint32_t replay = 0; replay < replays; ++replay) {
        const uint64_t replay_id = launch_id++;  // the graph launch itself
        const uint64_t replay_ns = 12000000ull * replay;
        for (uint32_t node = 0; node < nodes; ++node) {
            gpuobs_launch l;
            std::memset(&l, 0, sizeof l);
            l.launch_id = launch_id++;
            l.grid_id = grid_id++;
            l.stream_id = 0x7f00aa001230ull;
            l.host_begin_ns = host_base + replay_ns + next_random(&random) % 3000;
            l.function_slot = node % kFunctions;
            l.grid[0] = 1;
            l.grid[1] = l.grid[2] = 1;
            l.block[0] = 128u << (node % 3);
            l.block[1] = l.block[2] = 1;
            l.graph_launch_id = (uint32_t)replay_id;
            l.flags = GPUOBS_LAUNCH_GRAPH_NODE | GPUOBS_LAUNCH_FROM_NODE_TABLE;
            launches.push_back(l);
            counts.push_back({l.grid_id, 1, 1, 0});
            gpuobs_event e;
            std::memset(&e, 0, sizeof e);
            e.time_start = device_base + replay_ns + node * 20000ull + next_random(&random) % 500;
            e.time_end = e.time_start + 5000 + next_random(&random) % 5000;
            e.grid_id = l.grid_id;
            e.function_slot = l.function_slot;
            e.thread_index = e.exit_count = (uint16_t)l.block[0];
            e.sm_id = e.sm_id_end = (uint16_t)(node % 132);
            e.kind = GPUOBS_EVENT_BLOCK;
            events.push_back(e);
        }
        if ((replay + 1) % 8 != 0 && replay + 1 != replays) continue;
        // A flush window, as Drainer::write_flush_chunks writes it.
        written += file.write_table_chunk(GPUOBS_CHUNK_LAUNCHES, {nullptr, 0},
                                          {launches.data(), launches.size() * sizeof launches[0]}, sizeof launches[0],
                                          &buffers);
        gpuobs_flush_info info;
        std::memset(&info, 0, sizeof info);
        info.flush_seq = flush_seq++;
        info.attempted = info.recorded = events.size();
        info.host_time_ns = host_base + replay_ns + 10000000ull;
        info.launch_count_len = (uint32_t)counts.size();
        written +=
            file.write_table_chunk(GPUOBS_CHUNK_FLUSH, {&info, sizeof info},
                                   {counts.data(), counts.size() * sizeof counts[0]}, sizeof counts[0], &buffers);
        written += file.write_events(0, info.flush_seq, events.data(), (uint32_t)events.size());
        blocks += events.size();
        launches.clear();
        counts.clear();
        events.clear();
    }
    gpuobs_end_info end;
    std::memset(&end, 0, sizeof end);
    end.flushes = flush_seq;
    end.launches = (uint64_t)replays * nodes;
    end.events = blocks;
    written += file.write_chunk(GPUOBS_CHUNK_END, {{&end, sizeof end}});
    file.close();
    std::printf("written %llu\n", (unsigned long long)written);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    if (std::strcmp(argv[1], "--replays") == 0) {  // --replays N --nodes M [--pack LIBZ] OUT
        const bool pack = argc == 8 && std::strcmp(argv[5], "--pack") == 0;
        if ((argc != 6 && !pack) || std::strcmp(argv[3], "--nodes") != 0) return 2;
        return write_replays(argv[argc - 1], (uint32_t)std::atoi(argv[2]), (uint32_t)std::atoi(argv[4]),
                             pack ? argv[6] : nullptr);
    }
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
