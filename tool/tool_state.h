// The host tool's process-wide state (one Tool, never destroyed), the locks that
// guard it and their order, and the functions the tool's files call across each
// other: gpuobs_tool.cpp (callbacks, start and exit), context_registry.cpp (the
// contexts the tool knows), patching.cpp (module patching), recording_windows.cpp
// (pause, resume and automatic windows) and control_api.cpp (the extern "C" surface).
#pragma once
#include <sanitizer.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "api_trace.h"
#include "config.h"
#include "context_state.h"
#include "graph_table.h"
#include "gpuobs_schema.h"
#include "recording_file.h"

namespace gpuobs {

constexpr uint32_t kNew = GPUOBS_MODULE_NEW, kPatching = GPUOBS_MODULE_PATCHING, kPatched = GPUOBS_MODULE_PATCHED,
                   kFailed = GPUOBS_MODULE_PATCH_FAILED, kNotPatched = GPUOBS_MODULE_NOT_PATCHED;

// A loaded module: its status, and the context it was loaded into.
struct ModuleRecord {
    std::atomic<uint32_t> status{kNew};
    ContextState* context = nullptr;
};

// Lock order (a thread holding one may take those to its right, never to its left). Every lock of
// the tool is named here; a context's parts are in context_state.h:
//   Tool::window_mu -> Tool::patch_mu -> Drainer::cut_mu_ -> Drainer::flush_mu_ -> Drainer::queue_mu_
//   -> LaunchLog::mu_ -> PressureValve::plan_mu_
//   -> GraphTable::mu_ / Tool::callbacks_mu / Tool::contexts_mu / Tool::modules_mu / Tool::file_mu
//   -> ApiTrace::mu_ -> RecordingFile::mu_
// Leaves, which take nothing else while held: PressureValve::measure_mu_, Drainer::drained_mu_,
// ToolKernels::mu_ (taken under cut_mu_ or flush_mu_; it calls only the driver), RecordingFile::mu_.
// callbacks_mu is held while GraphTable::mu_ is asked whether node callbacks are needed;
// contexts_mu, modules_mu, file_mu and GraphTable::mu_ take nothing else while held but
// RecordingFile::mu_ (a notice or the run's first chunks are written under them). A launch callback
// never waits for a flush (a flush calls the driver, and a launching thread may hold driver locks), with
// one exception: when its launch API call returns (after LAUNCH_END), a thread whose rings are filling
// takes PressureValve::relief_mu_ (only ever tried, before cut_mu_) and may wait, each wait bounded,
// for a drain in progress, a measurement, and its own stream to go idle.
struct Tool {
    Config config;
    RecordingFile file;
    ChunkPacker packer;  // loaded at start when the config packs metadata; read-only after
    Sanitizer_SubscriberHandle subscriber = nullptr;
    bool active = false;
    ApiTrace api;

    std::mutex contexts_mu;
    // Live contexts. A destroyed context leaves the map (its handle may come back
    // for the next context, after a device reset) but its state is never freed:
    // callbacks outlive teardown.
    std::unordered_map<CUcontext, ContextState*> contexts;
    std::unordered_map<CUcontext, int> setup_attempts;  // contexts not (yet) set up
    std::unordered_map<CUcontext, std::string> first_setup_error;
    std::unordered_set<CUcontext> in_setup;

    std::mutex patch_mu;  // the sanitizer's patching calls must be serialised
    std::mutex modules_mu;
    std::unordered_map<CUmodule, ModuleRecord*> modules;  // never freed, like contexts
    std::atomic<bool> paused{false};                      // gpuobs.pause(): contexts created now start paused
    std::mutex window_mu;                                 // one pause or resume at a time
    std::mutex callbacks_mu;
    bool node_callbacks_on = false;  // SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN enabled
    // Instantiated CUDA graphs and what is known of their kernel nodes. A graph
    // keeps the code its kernels had when it was instantiated (patching or
    // unpatching a module under a live graph made later replays crash, seen on
    // the H200), so modules stay patched and windows turn on the device.
    GraphTable graphs;
    std::atomic<uint32_t> replay_ids{0};

    std::atomic<uint64_t> launch_callbacks{0}, node_callbacks{0}, graph_launches{0}, sync_callbacks{0};
    std::mutex file_mu;
    bool file_tried = false;
};

extern Tool* g_tool;  // never destroyed

// Fail-open messages are printed once per process tree: child processes
// inherit GPUOBS_REPORTED and stay quiet about the same problem.
template <typename... Args>
void report(const char* fmt, Args... args) {
    if (std::getenv("GPUOBS_REPORTED") != nullptr) return;
    std::fprintf(stderr, "gpuobs: ");
    std::fprintf(stderr, fmt, args...);
    std::fprintf(stderr, "\n");
    setenv("GPUOBS_REPORTED", "1", 1);
}

// context_registry.cpp: the contexts the tool knows.
ContextState* context_state(CUcontext ctx, CUdevice device, bool device_known);
void forget_context(CUcontext ctx);
ContextState* known_context(CUcontext ctx);
std::vector<std::pair<CUcontext, ContextState*>> all_contexts();
void synchronize_context(CUcontext ctx);
uint64_t flush_all(const char* reason, bool synchronize);
// At process exit, before the last flush: no context's rings are measured again.
void stop_all_measuring();

// gpuobs_tool.cpp: flushes every context and ends the file (its END chunk), once, in the
// process that opened it; at exit (the destructor) and at _exit / _Exit (exit_paths.cpp).
void finish_recording(const char* why);

// patching.cpp: module patching.
void patch_module(ContextState* state, const Sanitizer_ResourceModuleData& md);

// recording_windows.cpp: recording windows, and the graph node callbacks that follow them.
size_t live_graphs();
void update_node_callbacks();
bool node_callbacks_on();
void turn_window(ContextState* s);
int set_recording(bool on);

}  // namespace gpuobs
