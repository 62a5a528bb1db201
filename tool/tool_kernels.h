// The tool's own kernels in a context: the clock probe, which relates device
// time to the host clocks, and the harvest of the launch counters. Their output
// buffers are shared by the cut (quiet time) and the drain (clock, counts), so
// every use holds the one lock; it takes no other lock while held.
#pragma once
#include <cuda.h>
#include <sanitizer.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "config.h"
#include "device_arena.h"
#include "gpuobs_schema.h"

namespace gpuobs {

class ToolKernels {
public:
    ToolKernels(CUcontext ctx, const Config& config) : ctx_(ctx), config_(config) {}

    // Loads them once (the first call, on the program's synchronising thread: the
    // drain thread's first load of them failed on the H200); true when the probe is there.
    bool load();
    // Host clocks read around a one-thread kernel that reads %globaltimer, the
    // tightest of a few tries; false (no sample) on any failure.
    bool sample_clock(uint32_t device_index, Sanitizer_StreamHandle copy_stream, gpuobs_clock_sample* out);
    // The %globaltimer once everything launched before has run; 0 when the probe cannot run.
    uint64_t device_time_now(Sanitizer_StreamHandle copy_stream);
    // One total per launch-counter slot since the context's start, into `totals`.
    bool harvest_counts(gpuobs_launch_counter* counters, Sanitizer_StreamHandle copy_stream,
                        std::vector<uint64_t>* totals);
    // The totals of `slots` (sorted, unique) now, as (slot, total) into `out`: a quiet
    // cut's read of its graph nodes' slots (launch_counts.h). The harvest kernel, then
    // one small copy per run of nearby slots; false when it cannot (no kernel).
    bool harvest_slots(gpuobs_launch_counter* counters, Sanitizer_StreamHandle copy_stream,
                       const std::vector<uint32_t>& slots, std::vector<std::pair<uint32_t, uint64_t>>* out);
    // Launches the snapshot kernel into the arena's slot on the program's `stream`
    // (the caller has made the context current); false when it cannot. No lock:
    // after load() its function is fixed, and it shares no buffer with the others.
    bool queue_snapshot(CUstream stream, const DeviceArena& arena, uint32_t slot, uint64_t seq);

private:
    bool load_locked();  // under mu_
    bool run_probe();    // under mu_, the context current

    const CUcontext ctx_;
    const Config& config_;
    std::mutex mu_;
    bool tried_ = false;
    std::atomic<bool> done_{false};  // set once the first load has finished, either way
    CUfunction probe_fn_ = nullptr;
    CUfunction gather_fn_ = nullptr;
    CUfunction snapshot_fn_ = nullptr;
    uint64_t* totals_ = nullptr;  // device: one total per launch-counter slot
    CUstream probe_stream_ = nullptr;
    uint64_t* probe_out_ = nullptr;
};

}  // namespace gpuobs
