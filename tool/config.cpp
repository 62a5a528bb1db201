#include "config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpuobs_schema.h"

namespace gpuobs {

static const char* const kModeNames[] = GPUOBS_MODE_NAMES;

// Fields a row leaves out are 0 (the table says so); -Wextra would list each one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const gpuobs_record_option kOptions[] = {GPUOBS_RECORD_OPTIONS(GPUOBS_OPTION_ROW)};
#pragma GCC diagnostic pop
static_assert(sizeof kOptions / sizeof kOptions[0] == GPUOBS_OPTION_COUNT, "a row per option");

const gpuobs_record_option& record_option(uint32_t option) { return kOptions[option]; }

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

// A duration: a whole number with ns, us, ms or s (a fraction too, where the
// nanoseconds come out whole: 1.5ms), or a bare number of nanoseconds.
static bool parse_duration(const std::string& text, uint64_t* ns) {
    static const struct {
        const char* name;
        uint64_t ns;
    } kUnits[] = {{"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000}};
    size_t i = 0;
    uint64_t whole = 0, frac = 0, frac_scale = 1;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
        if (whole > (UINT64_MAX - 9) / 10) return false;
        whole = whole * 10 + uint64_t(text[i] - '0');
    }
    if (i == 0) return false;
    if (i < text.size() && text[i] == '.') {
        const size_t first = ++i;
        for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
            if (i - first >= 9) return false;
            frac = frac * 10 + uint64_t(text[i] - '0');
            frac_scale *= 10;
        }
        if (i == first) return false;
    }
    const std::string unit = text.substr(i);
    uint64_t scale = 0;
    if (unit.empty() && frac_scale == 1) scale = 1;
    for (const auto& u : kUnits)
        if (unit == u.name) scale = u.ns;
    if (scale == 0 || whole > UINT64_MAX / scale || (frac * scale) % frac_scale != 0) return false;
    const uint64_t part = frac * scale / frac_scale;
    if (whole * scale > UINT64_MAX - part) return false;
    *ns = whole * scale + part;
    return true;
}

// "ON/PERIOD" (GPUOBS_OPTION_DUTY): both durations, PERIOD in [lo, hi], 0 < ON < PERIOD.
static bool parse_duty(const char* name, const std::string& v, uint64_t lo, uint64_t hi, uint64_t* on, uint64_t* period,
                       std::string* error) {
    const size_t slash = v.find('/');
    if (slash == std::string::npos || !parse_duration(v.substr(0, slash), on) ||
        !parse_duration(v.substr(slash + 1), period)) {
        *error = std::string(name) + "='" + v + "' is not ON/PERIOD, two durations such as 50ms/5s";
        return false;
    }
    if (*period < lo || *period > hi) {
        *error = std::string(name) + "='" + v + "': the period is not in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "] ns";
        return false;
    }
    if (*on == 0 || *on >= *period) {
        *error = std::string(name) + "='" + v + "': ON is not more than 0 and less than PERIOD";
        return false;
    }
    return true;
}

static std::vector<std::string> words(const char* text) {
    std::vector<std::string> out;
    std::string word;
    for (const char* c = text == nullptr ? "" : text;; ++c) {
        if (*c == ' ' || *c == '\0') {
            if (!word.empty()) out.push_back(word);
            word.clear();
            if (*c == '\0') return out;
        } else {
            word += *c;
        }
    }
}

// "a or b", "a, b or c"; a longer list "one of a, b, c, d" (the CLI says them alike).
static std::string said_list(const std::vector<std::string>& choices) {
    std::string said = choices.size() > 3 ? "one of " : "";
    for (size_t i = 0; i < choices.size(); ++i) {
        const bool last = i + 1 == choices.size();
        said += (i == 0 ? "" : (last && choices.size() <= 3) ? " or " : ", ") + choices[i];
    }
    return said;
}

// One row's value: its variable's text, else its old name's, else the row's default.
static bool read_option(const gpuobs_record_option& o, const char* (*lookup)(const char*), uint64_t* number,
                        std::string* text, std::string* error) {
    const char* name = o.env;
    const char* s = lookup(o.env);
    if (s == nullptr && o.old_env != nullptr) {
        name = o.old_env;
        s = lookup(o.old_env);
    }
    if (s == nullptr) s = o.fallback;
    const std::string v(s);
    switch (o.kind) {
        case GPUOBS_OPTION_WHOLE:
            if ((o.flags & GPUOBS_OPTION_ZERO_FITS) && v == "0") {
                *number = 0;  // as much as fits
                return true;
            }
            return parse_u64(name, s, o.lo, o.hi, number, error);
        case GPUOBS_OPTION_SWITCH:
            if (!(o.flags & GPUOBS_OPTION_ON_UNLESS_0) && v != "0" && v != "1") {
                *error = std::string(name) + "='" + v + "' is not 0 or 1";
                return false;
            }
            *number = v != "0";
            return true;
        case GPUOBS_OPTION_MODE:
        case GPUOBS_OPTION_CHOICE: {
            const std::vector<std::string> choices =
                o.kind == GPUOBS_OPTION_MODE ? std::vector<std::string>(std::begin(kModeNames), std::end(kModeNames))
                                             : words(o.choices);
            for (size_t i = 0; i < choices.size(); ++i) {
                if (v == choices[i]) {
                    *number = i;
                    return true;
                }
            }
            for (const std::string& alias : words(o.aliases)) {  // ALIAS=WORD
                const size_t eq = alias.find('=');
                if (alias.compare(0, eq, v) != 0 || eq != v.size()) continue;
                for (size_t i = 0; i < choices.size(); ++i) {
                    if (alias.compare(eq + 1, std::string::npos, choices[i]) == 0) {
                        *number = i;
                        return true;
                    }
                }
            }
            *error = std::string(name) + "='" + v + "' is not " + said_list(choices);
            if (o.old_env != nullptr)
                *error += std::string(" (") + o.env + " wins over its old name " + o.old_env + ")";
            return false;
        }
        case GPUOBS_OPTION_DUTY: {
            uint64_t on = 0, period = 0;
            if (!v.empty() && !parse_duty(name, v, o.lo, o.hi, &on, &period, error)) return false;
            *number = period;  // 0: off
            *text = v;
            return true;
        }
        case GPUOBS_OPTION_PATH:
            if (v.empty()) {
                *error = std::string(name) + " is empty";
                return false;
            }
            *text = v;
            return true;
        default:  // GPUOBS_OPTION_TEXT
            *text = v;
            return true;
    }
}

static const char* no_variables(const char*) { return nullptr; }

Config::Config() {
    std::string error;
    read_options(no_variables, &error);  // the defaults are good (tests/native/record_options_check.cpp)
}

bool Config::read_options(Lookup lookup, std::string* error) {
    for (uint32_t i = 0; i < GPUOBS_OPTION_COUNT; ++i)
        if (!read_option(kOptions[i], lookup, &numbers_[i], &texts_[i], error)) return false;
    mode = (uint32_t)number(GPUOBS_OPT_mode);
    sample_shift = gpuobs_mode_has(mode, GPUOBS_TRAIT_EVERY_ACCESS) ? 0 : (uint32_t)number(GPUOBS_OPT_sample_shift);
    capacity = number(GPUOBS_OPT_capacity);
    device_memory_mib = number(GPUOBS_OPT_device_memory_mib);
    launch_scope = number(GPUOBS_OPT_scope) == 1;  // "function launch"
    output = text(GPUOBS_OPT_output);
    clock_probe = number(GPUOBS_OPT_clock_probe) != 0;
    api_trace = number(GPUOBS_OPT_api_trace) != 0;
    graph_nodes = static_cast<GraphNodes>(number(GPUOBS_OPT_graph_nodes));
    start_paused = number(GPUOBS_OPT_paused) != 0;
    lossless = number(GPUOBS_OPT_lossless) != 0;
    window_every = (uint32_t)number(GPUOBS_OPT_window_every);
    budget_bytes_per_s = number(GPUOBS_OPT_budget) * 1000000ull;
    pack_metadata = number(GPUOBS_OPT_pack_metadata) == 0;  // "zlib none"
    duty_on_ns = duty_period_ns = 0;
    if (number(GPUOBS_OPT_duty) != 0) {
        const gpuobs_record_option& o = kOptions[GPUOBS_OPT_duty];
        parse_duty(o.env, text(GPUOBS_OPT_duty), o.lo, o.hi, &duty_on_ns, &duty_period_ns, error);  // read above
    }
    return true;
}

bool Config::load(std::string* error) {
    if (!read_options([](const char* variable) -> const char* { return std::getenv(variable); }, error)) return false;
    if (const std::string& s = text(GPUOBS_OPT_kernels); !s.empty()) {
        std::string why;
        if (!kernel_filter.compile(s, &why)) {
            *error = "GPUOBS_KERNELS='" + s + "' is not a valid regular expression: " + why;
            return false;
        }
        has_kernel_filter = true;
        kernel_filter_text = s;
    }
    if (duty_period_ns != 0 && (window_every != 0 || start_paused)) {
        *error = std::string("GPUOBS_DUTY and ") + (window_every != 0 ? "GPUOBS_WINDOW_EVERY" : "GPUOBS_START_PAUSED") +
                 " are two ways to turn windows: set one";
        return false;
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
    if (const char* s = std::getenv("GPUOBS_DUTY_ON_HOST")) duty_on_host = s[0] != '\0' && s[0] != '0';
    if (const char* s = std::getenv("GPUOBS_PROBE")) probe = s;
    if (const char* s = std::getenv("GPUOBS_DUMP_PATCHED_CODE")) dump_patched_code = s;
    if (const char* s = std::getenv("GPUOBS_ZLIB")) zlib_library = s;
    if (patches_needed() && patches.empty()) {
        *error = "GPUOBS_PATCHES is not set: no device patches to insert (run through `gpuobs record`)";
        return false;
    }
    return true;
}

}  // namespace gpuobs
