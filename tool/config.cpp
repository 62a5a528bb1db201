#include "config.h"

#include <cerrno>
#include <cstdlib>

#include "gpuobs_schema.h"

namespace gpuobs {

static const char* const kModeNames[] = GPUOBS_MODE_NAMES;

const char* mode_name(uint32_t mode) {
    return mode < sizeof(kModeNames) / sizeof(kModeNames[0]) ? kModeNames[mode] : "unknown";
}

bool parse_mode(const std::string& text, uint32_t* mode) {
    for (uint32_t i = 0; i < sizeof(kModeNames) / sizeof(kModeNames[0]); ++i) {
        if (text == kModeNames[i]) {
            *mode = i;
            return true;
        }
    }
    return false;
}

static bool parse_u64(const char* name, const char* text, uint64_t lo, uint64_t hi, uint64_t* out, std::string* error) {
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < lo || v > hi) {
        *error = std::string(name) + "='" + text + "' is not a whole number in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]";
        return false;
    }
    *out = v;
    return true;
}

// A 0/1 switch; unset leaves `out` as it is.
static bool parse_switch(const char* name, bool* out, std::string* error) {
    const char* s = std::getenv(name);
    if (s == nullptr) return true;
    std::string v(s);
    if (v != "0" && v != "1") {
        *error = std::string(name) + "='" + v + "' is not 0 or 1";
        return false;
    }
    *out = v == "1";
    return true;
}

bool Config::load(std::string* error) {
    if (const char* m = std::getenv("GPUOBS_MODE")) {
        if (!parse_mode(m, &mode)) {
            std::string names;
            for (const char* name : kModeNames) names += std::string(names.empty() ? "" : ", ") + name;
            *error = std::string("GPUOBS_MODE='") + m + "' is not one of " + names;
            return false;
        }
    }
    uint64_t v = 0;
    if (const char* s = std::getenv("GPUOBS_SAMPLE_SHIFT")) {
        if (!parse_u64("GPUOBS_SAMPLE_SHIFT", s, 0, GPUOBS_MAX_SAMPLE_SHIFT, &v, error)) return false;
        sample_shift = (uint32_t)v;
    }
    if (gpuobs_mode_has(mode, GPUOBS_TRAIT_EVERY_ACCESS)) sample_shift = 0;
    if (const char* s = std::getenv("GPUOBS_CAPACITY")) {
        capacity = 0;  // "0": as many records as the device memory budget holds
        if (std::string(s) != "0") {
            if (!parse_u64("GPUOBS_CAPACITY", s, GPUOBS_MIN_CAPACITY, GPUOBS_MAX_CAPACITY, &v, error)) return false;
            capacity = v;
        }
    }
    if (const char* s = std::getenv("GPUOBS_DEVICE_MEMORY_MIB")) {
        if (!parse_u64("GPUOBS_DEVICE_MEMORY_MIB", s, 64, 1 << 20, &v, error)) return false;
        device_memory_mib = v;
    }
    // GPUOBS_CALLBACK_SCOPE; the design's name for it, GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE, is read when it is unset.
    const char* scope_name = "GPUOBS_CALLBACK_SCOPE";
    const char* scope_value = std::getenv(scope_name);
    if (scope_value == nullptr) {
        scope_name = "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE";
        scope_value = std::getenv(scope_name);
    }
    if (scope_value != nullptr) {
        std::string scope(scope_value);
        if (scope == "launch")
            launch_scope = true;
        else if (scope == "function")
            launch_scope = false;
        else {
            *error = std::string(scope_name) + "='" + scope + "' is not function or launch " +
                     "(GPUOBS_CALLBACK_SCOPE wins over its old name GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE)";
            return false;
        }
    }
    if (const char* s = std::getenv("GPUOBS_KERNELS")) {
        if (*s != '\0') {
            std::string why;
            if (!kernel_filter.compile(s, &why)) {
                *error = std::string("GPUOBS_KERNELS='") + s + "' is not a valid regular expression: " + why;
                return false;
            }
            has_kernel_filter = true;
            kernel_filter_text = s;
        }
    }
    if (const char* s = std::getenv("GPUOBS_OUTPUT")) {
        if (*s == '\0') {
            *error = "GPUOBS_OUTPUT is empty";
            return false;
        }
        output = s;
    }
    if (const char* s = std::getenv("GPUOBS_CLOCK_PROBE")) clock_probe = std::string(s) != "0";
    if (!parse_switch("GPUOBS_API_TRACE", &api_trace, error)) return false;
    if (const char* s = std::getenv("GPUOBS_GRAPH_NODES")) {
        std::string v(s);
        if (v == "learn")
            graph_nodes = GraphNodes::kLearn;
        else if (v == "every" || v == "1")
            graph_nodes = GraphNodes::kEvery;
        else if (v == "none" || v == "0")
            graph_nodes = GraphNodes::kNone;
        else {
            *error = "GPUOBS_GRAPH_NODES='" + v + "' is not learn, every or none";
            return false;
        }
    }
    if (!parse_switch("GPUOBS_START_PAUSED", &start_paused, error)) return false;
    if (!parse_switch("GPUOBS_LOSSLESS", &lossless, error)) return false;
    if (const char* s = std::getenv("GPUOBS_WINDOW_EVERY")) {
        if (!parse_u64("GPUOBS_WINDOW_EVERY", s, 0, 1u << 30, &v, error)) return false;
        window_every = (uint32_t)v;
    }
    if (const char* s = std::getenv("GPUOBS_DUTY_PERIOD_NS")) {
        if (!parse_u64("GPUOBS_DUTY_PERIOD_NS", s, 1000000, 86400000000000ull, &v, error)) return false;
        duty_period_ns = v;
        const char* on = std::getenv("GPUOBS_DUTY_ON_NS");
        if (on == nullptr) {
            *error = "GPUOBS_DUTY_PERIOD_NS is set without GPUOBS_DUTY_ON_NS";
            return false;
        }
        if (!parse_u64("GPUOBS_DUTY_ON_NS", on, 1, duty_period_ns - 1, &v, error)) return false;
        duty_on_ns = v;
        if (window_every != 0) {
            *error = "GPUOBS_DUTY_PERIOD_NS and GPUOBS_WINDOW_EVERY are two ways to turn windows: set one";
            return false;
        }
    }
    // A window may only turn at a point where no kernel runs: without per-node
    // callbacks a graph replay is invisible to the tool and may still be running.
    if (window_every != 0 && graph_nodes == GraphNodes::kNone) {
        *error =
            "GPUOBS_WINDOW_EVERY needs graph replays listed (GPUOBS_GRAPH_NODES=learn or every): without them "
            "the tool cannot tell when a graph replay has finished";
        return false;
    }
    if (const char* s = std::getenv("GPUOBS_PATCHES")) patches = s;
    if (const char* s = std::getenv("GPUOBS_PROBE")) probe = s;
    if (const char* s = std::getenv("GPUOBS_DUMP_PATCHED_CODE")) dump_patched_code = s;
    if (patches_needed() && patches.empty()) {
        *error = "GPUOBS_PATCHES is not set: no device patches to insert (run through `gpuobs record`)";
        return false;
    }
    return true;
}

}  // namespace gpuobs
