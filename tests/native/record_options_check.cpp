// The record options' table as the tool sees it (tool/config.cpp), printed as JSON
// for tests/test_record_options.py to compare with Python's reading of the same rows.
//   record_options_check        every row, with the value Config takes when no variable is set
//   record_options_check load   Config::load() under this process's environment: its error,
//                               or the options the tool's files read by name
#include <cstdio>
#include <cstring>
#include <string>

#include "config.h"

namespace {

std::string quoted(const char* text) {
    std::string out = "\"";
    for (const char* c = text == nullptr ? "" : text; *c != '\0'; ++c) {
        if (*c == '"' || *c == '\\') {
            out += '\\';
            out += *c;
        } else if ((unsigned char)*c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", (unsigned)(unsigned char)*c);
            out += buf;
        } else {
            out += *c;
        }
    }
    return out + "\"";
}

std::string number(uint64_t v) { return std::to_string(v); }

const char* graph_nodes_name(gpuobs::Config::GraphNodes how) {
    using GraphNodes = gpuobs::Config::GraphNodes;
    return how == GraphNodes::kLearn ? "learn" : how == GraphNodes::kEvery ? "every" : "none";
}

}  // namespace

int main(int argc, char** argv) {
    using gpuobs::Config;
    if (argc > 1 && std::strcmp(argv[1], "load") == 0) {
        Config config;
        std::string error;
        if (!config.load(&error)) {
            std::printf("{\"error\": %s}\n", quoted(error.c_str()).c_str());
            return 0;
        }
        std::printf(
            "{\"mode\": %u, \"sample_shift\": %u, \"capacity\": %s, \"device_memory_mib\": %s, \"kernels\": %s, "
            "\"output\": %s, \"launch_scope\": %d, \"clock_probe\": %d, \"api_trace\": %d, \"graph_nodes\": \"%s\", "
            "\"start_paused\": %d, \"window_every\": %u, \"lossless\": %d, \"duty_on_ns\": %s, \"duty_period_ns\": "
            "%s}\n",
            config.mode, config.sample_shift, number(config.capacity).c_str(), number(config.device_memory_mib).c_str(),
            quoted(config.kernel_filter_text.c_str()).c_str(), quoted(config.output.c_str()).c_str(),
            config.launch_scope, config.clock_probe, config.api_trace, graph_nodes_name(config.graph_nodes),
            config.start_paused, config.window_every, config.lossless, number(config.duty_on_ns).c_str(),
            number(config.duty_period_ns).c_str());
        return 0;
    }
    const Config defaults;
    std::printf("[\n");
    for (uint32_t i = 0; i < GPUOBS_OPTION_COUNT; ++i) {
        const gpuobs_record_option& o = gpuobs::record_option(i);
        const auto option = static_cast<gpuobs_option_index>(i);
        std::printf(
            "{\"name\": %s, \"env\": %s, \"kind\": %d, \"fallback\": %s, \"lo\": %s, \"hi\": %s, \"flags\": %u, "
            "\"choices\": %s, \"aliases\": %s, \"old_env\": %s, \"cli\": %s, \"metavar\": %s, \"unit\": %s, "
            "\"help\": %s, \"default_number\": %s, \"default_text\": %s}%s\n",
            quoted(o.name).c_str(), quoted(o.env).c_str(), o.kind, quoted(o.fallback).c_str(), number(o.lo).c_str(),
            number(o.hi).c_str(), o.flags, quoted(o.choices).c_str(), quoted(o.aliases).c_str(),
            quoted(o.old_env).c_str(), quoted(o.cli).c_str(), quoted(o.metavar).c_str(), quoted(o.unit).c_str(),
            quoted(o.help).c_str(), number(defaults.number(option)).c_str(),
            quoted(defaults.text(option).c_str()).c_str(), i + 1 == GPUOBS_OPTION_COUNT ? "" : ",");
    }
    std::printf("]\n");
    return 0;
}
