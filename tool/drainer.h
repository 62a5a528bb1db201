// A context's drainer: flush windows cut from the device's rings at quiet points
// (or by an explicit flush), queued, and moved into the recording file by a
// thread of its own while kernels go on claiming past the cut
// (docs/recording-path.md, steps 2 and 3).
#pragma once
#include <cuda.h>
#include <sanitizer.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "config.h"
#include "device_arena.h"
#include "gpuobs_schema.h"
#include "recording_file.h"
#include "ring_cut.h"

namespace gpuobs {

class Drainer;
class LaunchLog;
class PressureValve;
class Sampler;
class ToolKernels;

// Whether a mode's claims count on the low 32 bits of the stripe counters (the block entries').
inline bool claims_on_low_half(uint32_t mode) { return gpuobs_mode_has(mode, GPUOBS_TRAIT_CLAIMS_LOW_HALF); }
// Each stripe's claim and drop counters, read on `stream`, the claims widened
// from `drained` where `low_half_only` (ring_cut.h: claims_from_counter).
bool read_claims(gpuobs_stripe* device, uint32_t count, Sanitizer_StreamHandle stream,
                 const std::vector<uint64_t>& drained, bool low_half_only, std::vector<uint64_t>* claimed,
                 std::vector<uint64_t>* dropped);
// Blocks (or accesses) sampled out so far: every line of the control block's stripes, summed.
bool read_sampled_out(gpuobs_stripe* device, Sanitizer_StreamHandle stream, uint64_t* total);
// Whether a mode writes records (and so a SAMPLING chunk after each flush).
inline bool writes_records(uint32_t mode) {
    return gpuobs_mode_has(mode, GPUOBS_TRAIT_BLOCK_RECORDS) || gpuobs_mode_has(mode, GPUOBS_TRAIT_ACCESS_RECORDS);
}
uint64_t sum_of(const std::vector<uint64_t>& v);
// crash_drain.cpp: on a crash signal, the drains watched finish first (2 s at most).
void install_crash_drain();
void watch_drains_on_crash(Drainer* drainer);
// A non-blocking stream of the tool's own in this context, as the sanitizer
// names it (its copies take that handle); null when it cannot be made.
Sanitizer_StreamHandle create_own_stream(CUcontext ctx);

// One flush window: the launches it lists and where each stripe's claims stood
// when it was cut. Everything claimed before the cut belongs to it.
struct FlushWindow {
    const char* reason = "";
    bool quiet = false;
    uint64_t host_time_ns = 0;
    std::vector<gpuobs_launch> launches;
    std::vector<uint8_t> selected;  // by function slot: passes the kernel filter
    uint64_t unrecorded = 0;
    std::vector<uint64_t> claimed, dropped;            // per stripe, positions so far
    std::vector<uint64_t> warp_claimed, warp_dropped;  // block_starts' arrivals
    uint64_t unmatched_exit_threads = 0;               // so far
    uint64_t sampled_out = 0;                          // so far, every SM's line summed
    uint64_t device_quiet_ns = 0;
    // How long the cut took on its thread (the program's, at a synchronisation), and
    // of it the claim counters' reads and the graph-node slots' harvest: GPUOBS_DEBUG.
    uint64_t cut_ns = 0, cut_claims_ns = 0, cut_slots_ns = 0;
    // Cut at an in-stream snapshot: the arena's snapshot slot whose counters the
    // drain harvests (-1: the live counters), and every slot the window holds
    // (merged windows hold several), released once it is drained.
    int snapshot = -1;
    std::vector<int> snapshot_slots;
    // launch_counts.h: the number of the window's last launch (LaunchLog), and the
    // totals of its graph-node slots read at a quiet cut (slot, total; sorted).
    uint64_t launches_end = 0;
    std::vector<std::pair<uint32_t, uint64_t>> cut_totals;
};

// One ring of records on the device (the events, or block_starts' warp
// arrivals) and how far the host has drained each stripe of it.
struct RingState {
    std::vector<uint64_t> drained;       // per stripe: positions before this are in the file
    std::vector<uint64_t> dropped_seen;  // per stripe: drops counted into the file so far

    void reset(uint32_t stripes) {
        drained.assign(stripes, 0);
        dropped_seen.assign(stripes, 0);
    }
    // The device's limit for each stripe (ring_cut.h: one lap past what is drained).
    std::vector<uint64_t> limits(uint64_t per_stripe) const {
        std::vector<uint64_t> out;
        for (uint64_t d : drained) out.push_back(ring_limit(d, per_stripe));
        return out;
    }
};

class Drainer {
public:
    Drainer(CUcontext ctx, uint32_t device_index, const Config& config, RecordingFile& file, LaunchLog& launches,
            PressureValve& valve, ToolKernels& kernels)
        : ctx_(ctx),
          device_index_(device_index),
          config_(config),
          file_(file),
          launches_(launches),
          valve_(valve),
          kernels_(kernels) {}

    void start(const DeviceArena& arena);  // after the arena is set up: every ring empty
    // The sampler whose rule and gate each flush's SAMPLING chunk reports (set once, before start).
    void set_sampler(Sampler* sampler) { sampler_ = sampler; }

    // Moves the device's rings into the file. With require_quiet, only at a quiet
    // point (no stream left unsynchronised), where it only cuts the window and
    // leaves the rest to the drain thread; any other flush waits until its window
    // is in the file. Launch callbacks never flush.
    void flush(const char* reason, bool require_quiet);
    // An in-stream snapshot has completed (PressureValve): a window of the launches
    // listed before it, cut at its claims, exact as a quiet point's; false when it
    // came too late (a later cut took its launches) or cannot be trusted.
    bool cut_at_snapshot(int slot, uint64_t launches, uint64_t stream_key);
    // Waits (without taking a lock: a crash handler calls it) until every window
    // cut so far is in the file, or until timeout_ms; true when it got there.
    bool wait_for_drains(int timeout_ms) const;
    // Until every window cut so far has its ring positions free again (before its
    // records are classified and written): what a relief waits for.
    bool wait_for_release(int timeout_ms) const;
    uint64_t windows_cut() const { return windows_cut_.load(); }
    // Starts the drain thread, which makes its stream and pinned buffer before any
    // window comes: made at the first drain, they held it up 37-50 ms (H100), longer
    // than a storm of 1,000 launches took to fill a small ring. Once; any thread.
    void warm_up() { start_drain_thread(); }
    uint64_t windows_released() const { return windows_released_.load(); }
    // The rings' drained positions as of the last drain: what fill measurements read against.
    void drained_views(std::vector<uint64_t>* events, std::vector<uint64_t>* arrivals);
    // Bytes this context's flushes wrote besides the records themselves (launch
    // tables, flush records, chunk headers): the data budget charges them too, so
    // that the file, not only its records, keeps to it.
    uint64_t table_bytes() const { return table_bytes_.load(); }
    // The next drain takes a clock sample (the context's last flush takes one).
    void sample_clock_next() { last_clock_sample_ns_ = 0; }
    // Holds off every drain for the caller's scope (the context's teardown).
    std::unique_lock<std::mutex> exclusive() { return std::unique_lock<std::mutex>(flush_mu_); }

private:
    // cut_window, under cut_mu_: the window's launches and claim positions.
    // drain_window, under flush_mu_ on the drain thread (or the flushing one): its
    // records out of the rings into staging_, classified, written with its counts;
    // the rings' limits raised past it.
    struct SnapshotCut {
        int slot;
        uint64_t launches, stream_key;
    };
    static constexpr SnapshotCut kNoSnapshot{-1, 0, 0};
    bool cut_window(const char* reason, bool require_quiet, FlushWindow* w, const SnapshotCut& at = kNoSnapshot);
    void queue_window(FlushWindow&& w, std::unique_lock<std::mutex>& cut_lock, bool wait_for_drain);
    void drain_window(FlushWindow& w);
    void settle_duty_off_time(FlushWindow& w, std::vector<gpuobs_launch_count>* counts, gpuobs_flush_info* info);
    void drain_loop();
    void start_drain_thread();
    void sample_clock();
    void classify_events(const std::vector<uint8_t>& selected, const std::vector<gpuobs_launch>& launches,
                         gpuobs_flush_info& info);

    void write_flush_chunks(const std::vector<gpuobs_launch>& launches, const std::vector<gpuobs_launch_count>& counts,
                            gpuobs_flush_info& info, const gpuobs_sampling_info& sampling);
    Sanitizer_StreamHandle drain_stream();  // under flush_mu_
    char* pinned_host();                    // under flush_mu_; null when none can be had
    Sanitizer_StreamHandle cut_stream();    // under cut_mu_

    const CUcontext ctx_;
    const uint32_t device_index_;
    const Config& config_;
    RecordingFile& file_;
    LaunchLog& launches_;
    PressureValve& valve_;
    ToolKernels& kernels_;
    Sampler* sampler_ = nullptr;
    const DeviceArena* arena_ = nullptr;  // set by start, fixed after

    // Lock order: cut_mu_, then flush_mu_, then queue_mu_ (tool_state.h has the whole order).
    std::mutex cut_mu_;  // serialises cuts, so windows reach the queue in order
    Sanitizer_StreamHandle cut_stream_ = nullptr;
    bool cut_stream_tried_ = false;
    bool raced_reported_ = false;

    std::mutex flush_mu_;  // serialises drains; owns what follows up to queue_mu_
    // The drain's own non-blocking stream: its copies never wait for, or join, the
    // program's streams (a graph capture in progress among them).
    Sanitizer_StreamHandle drain_stream_ = nullptr;
    std::once_flag drain_stream_once_;
    // The drain's pinned host buffer, made as the drain thread starts (warm_up); the
    // copies out of the rings pass through it, kPinnedBytes at most at a time.
    static constexpr size_t kPinnedBytes = 64u << 20;
    char* pinned_ = nullptr;
    std::once_flag pinned_once_;
    // block_starts' warp arrivals are folded into their blocks stripe by stripe on this many threads.
    static constexpr unsigned kFoldThreads = 8;
    std::vector<gpuobs_event> staging_;
    // Slots the last drained window may have counted a later launch's blocks in
    // (launch_counts.h: slots_lent_to_later); a duty cycle's settling leaves them be.
    std::unordered_set<uint32_t> slots_lent_;
    PackBuffers pack_buffers_;               // for the tables write_flush_chunks packs (under flush_mu_)
    std::vector<uint64_t> counter_staging_;  // one total per launch-counter slot
    // block_starts: this window's warp arrivals and the SLOTS chunk
    std::vector<gpuobs_warp_arrival> arrival_staging_;
    gpuobs_slots_info slots_info_{};
    // The rings' drain state, each counter slot's total at its last harvest, the
    // unmatched exits counted so far.
    RingState event_ring_, arrival_ring_;
    std::vector<uint64_t> counter_baseline_;
    uint64_t unmatched_seen_ = 0, sampled_out_seen_ = 0;
    uint64_t release_target_ = 0;  // the window count the drain under way releases
    std::atomic<uint64_t> last_clock_sample_ns_{0};

    // The drain thread and its queue of cut windows.
    std::mutex queue_mu_;
    std::condition_variable queue_cv_;
    std::deque<FlushWindow> queue_;
    bool drain_thread_started_ = false;
    std::atomic<bool> drain_thread_failed_{false};
    std::atomic<uint64_t> windows_cut_{0}, windows_drained_{0};  // read without the lock by wait_for_drains
    // Windows whose ring positions are free again (limits raised), which comes
    // before their records are classified and written.
    std::atomic<uint64_t> windows_released_{0};
    std::atomic<uint64_t> table_bytes_{0};  // see table_bytes()

    // The drained positions as of the last drain (a leaf lock).
    std::mutex drained_mu_;
    std::vector<uint64_t> drained_view_, warp_drained_view_;
};

}  // namespace gpuobs
