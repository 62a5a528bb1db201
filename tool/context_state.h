// Everything gpuobs keeps per CUDA context, as a facade over its parts, each
// named for its job and owning its lock:
//   DeviceArena   (device_arena.h)   the device memory the patches write into; fixed after setup, no lock
//   LaunchLog     (launch_log.h)     function slots, launches since the last cut, streams' sync state
//   PressureValve (pressure_valve.h) the fill estimate, the measuring thread, the program's waits
//   Drainer       (drainer.h)        flush windows cut, queued and drained into the file by its thread
//   ToolKernels   (tool_kernels.h)   the clock probe and the counter harvest
//   Sampler       (sampler.h)        the data budget and the duty cycle: the device's sample gate
// The callbacks (gpuobs_tool.cpp) and the registry call this facade only.
// Members are declared in lock order (tool_state.h has the whole order).
#pragma once
#include <sanitizer.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "clocks.h"
#include "config.h"
#include "device_arena.h"
#include "drainer.h"
#include "graph_table.h"
#include "gpuobs_schema.h"
#include "launch_log.h"
#include "pressure_valve.h"
#include "recording_file.h"
#include "sampler.h"
#include "tool_kernels.h"

namespace gpuobs {

class ContextState {
public:
    ContextState(CUcontext ctx, CUdevice device, const Config& config, RecordingFile& file);

    // Allocates the device arena and uploads the patches, with the context made
    // current for the duration; false (error names the failing step) leaves this
    // context uninstrumented.
    bool setup(std::string* error);
    CUcontext context() const { return ctx_; }
    bool active() const { return active_.load(); }
    uint32_t device_index() const { return device_index_; }
    // Whether the patches keep a duty cycle on the device (device_arena.h: duty):
    // its modules are then patched with the _duty twins.
    bool duty_on_device() const { return arena_.duty.period != 0; }

    // on_launch and on_graph_replay return true when the rings' fill is due a
    // measurement or relief: the caller then calls relieve_ring_pressure once the
    // launch is enqueued (when the launching API call returns).
    bool on_launch(const LaunchInfo& launch) { return active_ && launches_.on_launch(launch, paused_); }
    // Functions the driver has just loaded (lazy loading): each gets its slot and
    // callback data now, before any launch, so that kernels launched from the
    // device (which the host never sees) write under their own name.
    void on_functions_loaded(CUmodule module, const CUfunction* functions, uint32_t count) {
        if (active_) launches_.on_functions_loaded(module, functions, count);
    }
    // A module is being unloaded: its function handles may be reused by a later load.
    void on_module_unloading(CUmodule module) { launches_.on_module_unloading(module); }
    // A graph replay begins; while paused it is counted here (once), since the
    // per-node callbacks are off outside windows.
    void on_graph_launch(uint64_t stream_key) {
        if (paused_ && active_) launches_.on_paused_graph_launch(stream_key);
    }
    // A replay of an exec whose kernel nodes are learned: one launch per node,
    // listed from the table (flagged FROM_NODE_TABLE), no per-node callback.
    bool on_graph_replay(const std::vector<LearnedNode>& nodes, uint64_t stream_key, uint32_t replay_id) {
        return active_ && launches_.on_graph_replay(nodes, stream_key, replay_id);
    }
    // After a launch on `stream` (PressureValve::relieve says what it may wait for).
    void relieve_ring_pressure(CUstream stream, uint64_t stream_key) {
        if (active_ && !paused_) valve_.relieve(stream, stream_key);
    }
    // A launch whose API call was not seen around it: only a measurement is asked for.
    void ask_for_measurement() {
        if (active_ && !paused_) valve_.ask_for_measurement();
    }
    // Before the context goes (destroy, process exit): the sampler's thread ends, no
    // measurement is started again, and one under way is waited for (up to 0.5 s).
    void stop_measuring() {
        sampler_.stop();
        valve_.stop();
    }
    // A notice in the file (and on stderr) when the program's threads waited for
    // the rings since the last one (the totals so far), so its timings are read
    // knowingly; under GPUOBS_DEBUG, also what the pressure path did.
    void report_program_waits() { valve_.report_program_waits(); }
    // Both return true at a quiet point (no launch of this context in flight)
    // that ends an interval with launches in it: where a window may turn.
    bool on_stream_synchronized(uint64_t stream_key);
    bool on_context_synchronized();
    // Moves the device's rings into the file (Drainer::flush says when it waits).
    void flush(const char* reason, bool require_quiet = false) { drainer_.flush(reason, require_quiet); }
    // Waits, without a lock, until every window cut so far is in the file, or until timeout_ms.
    bool wait_for_drains(int timeout_ms) const { return drainer_.wait_for_drains(timeout_ms); }
    void on_destroy();

    // Recording windows. The patched code stays in place; pausing closes the
    // context's record gate on the device (see the schema), so launches, graph
    // replays included, run the patches' early return and are only counted on
    // the host. Turned only where none of the context's kernels runs (the gate is
    // written synchronously); false, and the state unchanged, when it cannot be.
    bool paused() const { return paused_.load(); }
    bool set_paused(bool paused);
    // Automatic windows: true when the interval that starts now is recorded.
    bool next_interval_recorded(uint32_t every) { return ++intervals_ % every == 0; }

private:
    void report_duty_cycle() const;
    // The tool's own quiet point (ring relief): marks the stream synchronised only
    // if it still has exactly `in_flight` launches, all by `launcher`.
    bool make_quiet_point(uint64_t stream_key, uint64_t in_flight, uintptr_t launcher);
    void write_device_info();

    const CUcontext ctx_;
    const CUdevice device_;
    const uint32_t device_index_;
    const Config& config_;
    RecordingFile& file_;
    std::atomic<bool> active_{false};
    std::atomic<bool> paused_{false};
    uint64_t intervals_ = 0;  // automatic windows: intervals ended at quiet points

    DeviceArena arena_;
    Drainer drainer_;
    LaunchLog launches_;
    PressureValve valve_;
    ToolKernels kernels_;
    Sampler sampler_;
};

}  // namespace gpuobs
