// A context's facade (context_state.h): its parts wired together, the quiet
// points the program's synchronisations make, pause and destruction. Set up in
// context_setup.cpp.
#include "context_state.h"

#include <time.h>

#include <cstdlib>
#include <mutex>

#include "context_guard.h"
#include "log.h"
#include "sanitizer_api.h"
#include "tool_state.h"

namespace gpuobs {

thread_local bool g_in_tool = false;

uint64_t clock_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

ContextState::ContextState(CUcontext ctx, CUdevice device, const Config& config, RecordingFile& file)
    : ctx_(ctx),
      device_(device),
      device_index_((uint32_t)device),
      config_(config),
      file_(file),
      drainer_(ctx, device_index_, config, file, launches_, valve_, kernels_),
      launches_(device_index_, config, file, arena_, valve_),
      valve_(ctx, device_index_, config, file, launches_, drainer_, kernels_,
             [this](uint64_t stream_key, uint64_t in_flight, uintptr_t launcher) {
                 return make_quiet_point(stream_key, in_flight, launcher);
             }),
      kernels_(ctx, config),
      sampler_(ctx, device_index_, config, drainer_) {
    drainer_.set_sampler(&sampler_);
}

bool ContextState::on_stream_synchronized(uint64_t stream_key) {
    const LaunchLog::Synced s = launches_.stream_synchronized(stream_key);
    if (s.quiet && s.pending) drainer_.flush("stream synchronised", true);
    return s.quiet;
}

bool ContextState::make_quiet_point(uint64_t stream_key, uint64_t in_flight, uintptr_t launcher) {
    const LaunchLog::Synced s = launches_.stream_synchronized(stream_key, in_flight, launcher);
    if (s.quiet && s.pending) drainer_.flush("rings filling", true);
    return s.marked && s.quiet;
}

bool ContextState::on_context_synchronized() {
    const LaunchLog::Synced s = launches_.context_synchronized();
    if (s.pending) drainer_.flush("context synchronised", true);
    return s.quiet;
}

bool ContextState::set_paused(bool paused) {
    // Before setup (paused from the start) the gate is initialised from paused_.
    const bool opening = !paused && gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_MEASURED_ENDS);
    if (active_ && paused != paused_ && !arena_.write_gate(ctx_, paused ? GPUOBS_RECORD_GATE_OFF : 0, opening)) {
        GPUOBS_LOG("cannot turn the recording window on the device; recording stays %s", paused_ ? "paused" : "on");
        return false;
    }
    paused_ = paused;
    launches_.bind_functions(!paused);  // the gate first: a function the sanitizer refuses still reads it
    return true;
}

void ContextState::on_destroy() {
    drainer_.sample_clock_next();  // the final flush takes a last clock sample
    sampler_.stop();
    valve_.stop();
    drainer_.flush("context destroyed", false);
    report_program_waits();
    auto no_drain = drainer_.exclusive();
    launches_.close();
}

}  // namespace gpuobs
