// The tool's options, read once from the environment that `gpuobs record` sets.
// Any bad value makes the tool stand down (fail open) with one line saying why.
#pragma once
#include <cstdint>
#include <string>

#include "gpuobs_schema.h"
#include "kernel_filter.h"

namespace gpuobs {

struct Config {
    uint32_t mode = GPUOBS_MODE_BLOCK_TRACE;
    uint32_t sample_shift = GPUOBS_DEFAULT_SAMPLE_SHIFT;
    uint64_t capacity = GPUOBS_DEFAULT_CAPACITY;                    // records per context; 0 = what the budget holds
    uint64_t device_memory_mib = GPUOBS_DEFAULT_DEVICE_MEMORY_MIB;  // the tool's device memory per context
    bool launch_scope = false;  // GPUOBS_CALLBACK_SCOPE=launch (old name: GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE)
    bool clock_probe = true;
    bool api_trace = false;
    // How graph replays' kernels are listed (GPUOBS_GRAPH_NODES): learn each exec's
    // kernel nodes from one replay, then list replays from that table (learn, the
    // default); per-node callbacks at every replay (every, also "1"); or not at all
    // (none, also "0": replayed blocks then belong to no listed launch).
    enum class GraphNodes { kNone, kEvery, kLearn };
    GraphNodes graph_nodes = GraphNodes::kLearn;
    // GPUOBS_LOSSLESS=1: when the rings fill, the launching thread waits for room (the
    // program's timing changes); by default what does not fit is dropped, counted.
    bool lossless = false;
    bool start_paused = false;  // GPUOBS_START_PAUSED=1: nothing patched until gpuobs.resume()
    uint32_t window_every = 0;  // GPUOBS_WINDOW_EVERY=N: record 1 interval in N between quiet syncs
    // GPUOBS_DUTY_ON_NS / GPUOBS_DUTY_PERIOD_NS: record the first ON of every PERIOD
    // of the run (duty_cycle.h), turning in the program's stream; 0: always.
    uint64_t duty_on_ns = 0, duty_period_ns = 0;
    bool has_kernel_filter = false;
    KernelFilter kernel_filter;  // GPUOBS_KERNELS (kernel_filter.h says what patterns may hold)
    std::string kernel_filter_text;
    std::string output = "gpuobs.gpuobs";
    std::string patches;            // fatbin with the device patches
    std::string probe;              // fatbin with the clock probe
    std::string dump_patched_code;  // GPUOBS_DUMP_PATCHED_CODE=DIR: write launched functions' code there

    // False with `error` set when an option is unusable.
    bool load(std::string* error);
    bool patches_needed() const { return gpuobs_mode_has(mode, GPUOBS_TRAIT_PATCHES); }
};

// Whether a mode writes records into rings that the drain must empty.
inline bool fills_rings(uint32_t mode) {
    return gpuobs_mode_has(mode, GPUOBS_TRAIT_BLOCK_RECORDS | GPUOBS_TRAIT_ACCESS_RECORDS);
}

const char* mode_name(uint32_t mode);
bool parse_mode(const std::string& text, uint32_t* mode);

}  // namespace gpuobs
