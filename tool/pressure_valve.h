// A context's pressure valve: keeps the rings from filling faster than the
// drain empties them. It plans every launch's share of a stripe into an
// estimate of the fullest one (ring_pressure.h), has a thread of its own measure
// the claim counters, and, once a launch API call returns with the rings past
// three quarters, makes the launching thread wait for a drain or for a quiet
// point of its own (pressure_valve.cpp says when, and why it is safe).
#pragma once
#include <cuda.h>
#include <sanitizer.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "config.h"
#include "device_arena.h"
#include "recording_file.h"
#include "ring_pressure.h"

namespace gpuobs {

class Drainer;
class LaunchLog;
class ToolKernels;

class PressureValve {
public:
    // make_quiet_point(stream_key, in_flight, launcher): marks the stream synchronised
    // (and cuts there) only if it still has exactly those launches, all by that thread.
    using QuietPoint = std::function<bool(uint64_t, uint64_t, uintptr_t)>;
    PressureValve(CUcontext ctx, uint32_t device_index, const Config& config, RecordingFile& file, LaunchLog& launches,
                  Drainer& drainer, ToolKernels& kernels, QuietPoint make_quiet_point)
        : ctx_(ctx),
          device_index_(device_index),
          config_(config),
          file_(file),
          launches_(launches),
          drainer_(drainer),
          kernels_(kernels),
          make_quiet_point_(std::move(make_quiet_point)) {}

    void start(const DeviceArena& arena);  // after the arena is set up

    // Under the launch log's lock: a launch's blocks planned into the estimate;
    // true when it asks for a measurement or relief.
    bool plan_blocks(const uint32_t grid[3], const uint32_t block[3]);
    // Under the launch log's lock, at a cut: the plan starts again from these claims.
    void reset_at_cut(uint64_t claims, uint64_t warp_claims);
    // At a snapshot's cut, which takes only the launches before it: their blocks
    // (and warps) leave the plan, the later ones stay.
    void advance_cut(uint64_t blocks, uint64_t warps, uint64_t claims, uint64_t warp_claims);
    // The drain is done with these snapshot slots (their windows are in the file).
    void release_snapshots(const std::vector<int>& slots);

    // After a launch API call returns (the driver holds none of its locks): asks for
    // a measurement when one is due, and when this stream is the only one with
    // launches in flight, all this thread's, queues an in-stream snapshot of the
    // claim counters behind them every eighth of a stripe planned at the even share
    // (snapshot_spacing: the slots then span a ring as the device fills it), so that the rings
    // drain while the program goes on; the program never waits. Lossless: past three
    // quarters of a stripe, waits for a drain in progress, and when none is left to
    // free room, waits (2 s at most) for that stream to go idle: a quiet point of the
    // tool's own, where the window is cut and released before the program goes on.
    void relieve(CUstream stream, uint64_t stream_key);
    // A launch whose API call was not seen around it: only a measurement is asked
    // for (waiting inside the launch callback itself hung a storm on the H200).
    void ask_for_measurement();
    // After a drain has freed room (once measuring has begun).
    void remeasure_after_drain();
    // Before the context goes: no measurement is started again, and one under way
    // is waited for (up to 0.5 s).
    void stop();
    // A notice in the file (and on stderr) when the program's threads waited since
    // the last one; under GPUOBS_DEBUG, also what the valve did.
    void report_program_waits();

private:
    void maybe_snapshot(CUstream stream, uint64_t stream_key);
    void poll_snapshots();  // on the measuring thread
    bool measure_fill(Sanitizer_StreamHandle stream);
    void measure_loop();
    void request_measure();
    bool measure_now(int timeout_ms);                  // asks, and waits for the answer
    bool measurement_stuck(uint64_t for_ns);           // one under way for longer than that
    enum class StreamWait { kIdle, kBusy, kUnknown };  // kUnknown: no query, or it failed
    StreamWait wait_for_stream(CUstream stream, int timeout_ms);
    void give_up_on_stream(uint64_t stream_key, const char* why);
    void note_program_waits();
    void log_counts() const;

    const CUcontext ctx_;
    const uint32_t device_index_;
    const Config& config_;
    RecordingFile& file_;
    LaunchLog& launches_;
    Drainer& drainer_;
    ToolKernels& kernels_;
    const QuietPoint make_quiet_point_;
    const DeviceArena* arena_ = nullptr;  // set by start, fixed after

    // One relief at a time (relief_mu_, only ever tried, before the drainer's locks).
    std::mutex relief_mu_;
    // The plan (plan_mu_, a leaf taken under the launch log's lock): blocks (and
    // block_starts' warp arrivals) listed since the last cut and all stripes' claims
    // at that cut; the estimate of the fullest stripe's fill.
    std::mutex plan_mu_;
    uint64_t blocks_since_cut_ = 0, warps_since_cut_ = 0;
    uint64_t claims_at_cut_ = 0, warp_claims_at_cut_ = 0;
    FillEstimate fill_;
    // The measuring thread: asked (measure_mu_, a leaf), it reads the claim counters
    // on its own stream, so that no launching thread calls the driver for it (one
    // that did, inside its launch, hung an 8-thread storm) and a long drain does
    // not delay it.
    std::mutex measure_mu_;
    std::condition_variable measure_cv_;
    bool measure_requested_ = false, measuring_ = false, measure_thread_started_ = false;
    uint64_t measures_done_ = 0;
    uint64_t measure_began_ns_ = 0;  // when the measurement under way began (measuring_)
    uint32_t failed_measures_ = 0;   // in a row; the measuring thread's own
    Sanitizer_StreamHandle measure_stream_ = nullptr;
    std::atomic<uint64_t> waits_noted_{0};        // the waits the last PROGRAM_WAITED notice counted
    std::atomic<bool> measuring_broken_{false};   // no thread or no stream to measure with: relief is off
    std::atomic<bool> measuring_stopped_{false};  // the context is going (stop)
    std::atomic<bool> drain_warmed_{false};       // Drainer::warm_up asked for (at the first launch)
    // A wait for a drain's release that ran out: not waited for again until the
    // rings are released past this window count.
    std::atomic<uint64_t> stuck_release_{0};
    // In-stream snapshots (snapshot_mu_, a leaf): the tool's snapshot kernel, queued
    // on the program's stream behind its launches, harvests the launch counters and
    // copies the control block into an arena slot; taken in slot order, completed in
    // the same order.
    struct Snapshot {
        uint64_t seq = 0;         // what its kernel publishes in the slot when done
        uint64_t launches = 0;    // listed before it was queued
        uint64_t stream_key = 0;  // where
        bool queued = false;      // its kernel has not published yet
        bool held = false;        // cut into a window the drain has not finished
    };
    std::mutex snapshot_mu_;
    Snapshot snapshots_[DeviceArena::kSnapshots];
    uint32_t next_snapshot_ = 0, oldest_snapshot_ = 0;
    uint64_t snapshot_seq_ = 0;
    std::atomic<uint32_t> snapshots_queued_{0};
    // The even share of every launch planned (plan_mu_): what snapshots are spaced by.
    uint64_t planned_even_ = 0, planned_at_snapshot_ = 0;
    // What the valve did: the first synchronisation is said, the rest are in
    // GPUOBS_DEBUG's line at the end.
    struct Counts {
        std::atomic<uint64_t> asked{0}, measured{0}, relieve{0}, waited{0}, other_streams{0}, capturing{0}, synced{0},
            gave_up{0}, waits{0}, waited_ns{0}, snapshots{0}, snapshot_cuts{0}, snapshots_late{0}, no_slot{0},
            no_snapshots{0}, not_alone{0}, enqueue_failed{0};
    } counts_;
};

}  // namespace gpuobs
