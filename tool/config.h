// The tool's options, read once from the environment that `gpuobs record` sets.
// Any bad value makes the tool stand down (fail open) with one line saying why.
// The record options (their variables, bounds and defaults) are the rows of
// schemas/gpuobs_record_options.h; every row is read and checked by its kind.
#pragma once
#include <cstdint>
#include <string>

#include "gpuobs_record_options.h"
#include "gpuobs_schema.h"
#include "kernel_filter.h"

namespace gpuobs {

struct Config {
    // Every record option as read: a number for WHOLE, SWITCH, MODE and CHOICE (the
    // word's index in its choices), the text for TEXT, PATH and DUTY (whose number
    // is its PERIOD, 0 when off).
    uint64_t number(gpuobs_option_index option) const { return numbers_[option]; }
    const std::string& text(gpuobs_option_index option) const { return texts_[option]; }

    // The options the tool's files read by name, filled from the rows by load().
    uint32_t mode = GPUOBS_MODE_BLOCK_TRACE;
    uint32_t sample_shift = 0;       // 0 in modes that record every access
    uint64_t capacity = 0;           // records per context; 0 = what the budget holds
    uint64_t device_memory_mib = 0;  // the tool's device memory per context
    bool launch_scope = false;       // GPUOBS_CALLBACK_SCOPE=launch (old name: GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE)
    bool clock_probe = true;
    bool api_trace = false;
    // How graph replays' kernels are listed (GPUOBS_GRAPH_NODES): learn each exec's
    // kernel nodes from one replay, then list replays from that table (learn, the
    // default); per-node callbacks at every replay (every, also "1"); or not at all
    // (none, also "0": replayed blocks then belong to no listed launch). In the order
    // of the row's choices.
    enum class GraphNodes : uint32_t { kLearn, kEvery, kNone };
    GraphNodes graph_nodes = GraphNodes::kLearn;
    // GPUOBS_LOSSLESS=1: when the rings fill, the launching thread waits for room (the
    // program's timing changes); by default what does not fit is dropped, counted.
    bool lossless = false;
    bool start_paused = false;  // GPUOBS_START_PAUSED=1: nothing patched until gpuobs.resume()
    uint32_t window_every = 0;  // GPUOBS_WINDOW_EVERY=N: record 1 interval in N between quiet syncs
    // GPUOBS_DUTY=ON/PERIOD as asked: kept on the device's clock, rounded to powers of
    // two (duty_cycle.h), or where that cannot be (device_arena.h: duty), by the
    // sampler's thread turning the sample gate (sampler.h); 0: always.
    uint64_t duty_on_ns = 0, duty_period_ns = 0;
    // GPUOBS_DUTY_ON_HOST=1 (tests): the sampler's gate even where the device could keep it.
    bool duty_on_host = false;
    // GPUOBS_BUDGET_MBPS: records a second the sampler keeps to (sampler.h); 0: none.
    uint64_t budget_bytes_per_s = 0;
    // GPUOBS_PACK_METADATA=zlib: LAUNCHES, FLUSH and API_CALLS chunks packed (chunk_compress.h)
    // by the zlib GPUOBS_ZLIB names (a test names one that is missing to see the tool write them as they are).
    bool pack_metadata = true;
    std::string zlib_library = "libz.so.1";
    bool has_kernel_filter = false;
    KernelFilter kernel_filter;  // GPUOBS_KERNELS (kernel_filter.h says what patterns may hold)
    std::string kernel_filter_text;
    std::string output;
    std::string patches;            // fatbin with the device patches
    std::string probe;              // fatbin with the clock probe
    std::string dump_patched_code;  // GPUOBS_DUMP_PATCHED_CODE=DIR: write launched functions' code there

    Config();  // every option at its row's default
    // False with `error` set when an option is unusable.
    bool load(std::string* error);
    bool patches_needed() const { return gpuobs_mode_has(mode, GPUOBS_TRAIT_PATCHES); }

private:
    using Lookup = const char* (*)(const char* variable);
    bool read_options(Lookup lookup, std::string* error);
    uint64_t numbers_[GPUOBS_OPTION_COUNT] = {};
    std::string texts_[GPUOBS_OPTION_COUNT];
};

// Whether a mode writes records into rings that the drain must empty.
inline bool fills_rings(uint32_t mode) {
    return gpuobs_mode_has(mode, GPUOBS_TRAIT_BLOCK_RECORDS | GPUOBS_TRAIT_ACCESS_RECORDS);
}

// The table's row of an option (GPUOBS_OPT_mode, ...).
const gpuobs_record_option& record_option(uint32_t option);

const char* mode_name(uint32_t mode);
bool parse_mode(const std::string& text, uint32_t* mode);

}  // namespace gpuobs
