// Ring pressure: a program that launches far more blocks between quiet points
// than the rings hold (an autotuner's timing loops, a long eager stretch) would
// otherwise lose them as drops. The host plans each launch's share of a stripe
// into an estimate of the fullest stripe (ring_pressure.h), corrected by
// measurements of the claim counters that a thread of the tool's own takes, on
// its own stream: a launching thread never calls the driver for one (one that
// did, inside its launch, hung an 8-thread storm on the H200), and a long drain
// does not hold one up. When the estimate passes half a stripe, the launching
// thread, once its launch API call returns, waits for a drain in progress; if
// none is left to free room and its stream is the only one with launches in
// flight, it synchronises that stream: a quiet point, where the window is cut,
// and waits for that drain. The program waits only when its records would
// otherwise be dropped.
#include <chrono>
#include <thread>
#include <vector>

#include "context_guard.h"
#include "context_state.h"
#include "cuda_driver.h"
#include "log.h"
#include "sanitizer_api.h"

namespace gpuobs {

namespace {

bool records_blocks(uint32_t m) { return m == GPUOBS_MODE_BLOCK_TRACE || m == GPUOBS_MODE_BLOCK_STARTS; }
bool records_accesses(uint32_t m) { return m == GPUOBS_MODE_MEM_SAMPLED || m == GPUOBS_MODE_MEM_FULL; }

// The planned per-stripe share of what was launched since the cut and has not
// started: `launched` blocks (or warps) against the claims made since the cut.
uint64_t unstarted_share(uint64_t launched, const std::vector<uint64_t>& claimed, uint64_t claims_at_cut,
                         uint32_t stripes) {
    const uint64_t total = sum_of(claimed);
    const uint64_t started = total > claims_at_cut ? total - claims_at_cut : 0;
    return stripe_share(launched > started ? launched - started : 0, stripes);
}

}  // namespace

bool ContextState::plan_blocks(uint64_t blocks, uint64_t warps_per_block) {
    const uint32_t mode = config_.mode;
    if (!records_blocks(mode) && !records_accesses(mode)) return false;
    blocks_since_cut_ += blocks;
    uint64_t share = stripe_share(blocks, stripe_count_);
    if (mode == GPUOBS_MODE_BLOCK_STARTS && warps_per_block > 1) {
        // block_starts' arrivals ring, in records of the event ring's size.
        const uint64_t warps = blocks * (warps_per_block - 1);
        warps_since_cut_ += warps;
        share = std::max(share, stripe_share(warps, stripe_count_) / GPUOBS_WARP_ARRIVALS_PER_EVENT);
    }
    // Memory modes write an unknown number of records per block: the plan only
    // paces their measurements, and what is measured decides.
    fill_.plan(share);
    return fill_.needs_relief() || fill_.measure_due();
}

// The fullest stripe's undrained claims (each ring in records of the event
// ring's size), with the planned share of the blocks launched and not yet
// started; on the measuring thread, on its own stream.
bool ContextState::measure_fill(Sanitizer_StreamHandle stream) {
    const bool starts = config_.mode == GPUOBS_MODE_BLOCK_STARTS;
    uint64_t planned_then, blocks_then, warps_then, claims_at_cut, warp_claims_at_cut;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        planned_then = fill_.planned;
        blocks_then = blocks_since_cut_;
        warps_then = warps_since_cut_;
        claims_at_cut = claims_at_cut_;
        warp_claims_at_cut = warp_claims_at_cut_;
    }
    std::vector<uint64_t> claimed, warp_claimed, drained, warp_drained, dropped;
    if (!read_claims(ctl_->stripes, stripe_count_, stream, &claimed, &dropped) ||
        (starts && !read_claims(ctl_->warp_stripes, stripe_count_, stream, &warp_claimed, &dropped)))
        return false;
    {
        std::lock_guard<std::mutex> lock(drained_mu_);
        drained = drained_view_;
        warp_drained = warp_drained_view_;
    }
    uint64_t fill = undrained_worst(claimed, drained);
    if (records_blocks(config_.mode)) fill += unstarted_share(blocks_then, claimed, claims_at_cut, stripe_count_);
    if (starts) {
        const uint64_t warps = undrained_worst(warp_claimed, warp_drained) +
                               unstarted_share(warps_then, warp_claimed, warp_claims_at_cut, stripe_count_);
        fill = std::max(fill, warps / GPUOBS_WARP_ARRIVALS_PER_EVENT);
    }
    std::lock_guard<std::mutex> lock(launch_mu_);
    fill_.measured_at(fill, planned_then);
    return true;
}

void ContextState::measure_loop() {
    become_tool_thread();
    measure_stream_ = create_own_stream();
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(measure_mu_);
            measure_cv_.wait(lock, [this] { return measure_requested_; });
            measure_requested_ = false;
            measuring_ = true;
        }
        bool ok = false;
        if (measure_stream_ != nullptr) {
            CurrentContext current(ctx_);
            ok = current.pushed && measure_fill(measure_stream_);
        }
        if (ok) ++pressure_counts_.measured;
        {
            std::lock_guard<std::mutex> lock(measure_mu_);
            ++measures_done_;
            measuring_ = false;
        }
        measure_cv_.notify_all();
    }
}

void ContextState::request_measure() {
    {
        std::lock_guard<std::mutex> lock(measure_mu_);
        measure_requested_ = true;
        if (!measure_thread_started_) {
            measure_thread_started_ = true;
            try {
                std::thread([this] { measure_loop(); }).detach();
            } catch (const std::exception& e) {
                GPUOBS_LOG("cannot start the ring-measuring thread (%s); rings that fill drop what they cannot hold",
                           e.what());
            }
        }
    }
    measure_cv_.notify_all();
}

void ContextState::remeasure_after_drain() {
    bool started;
    {
        std::lock_guard<std::mutex> lock(measure_mu_);
        started = measure_thread_started_;
    }
    if (started) request_measure();
}

bool ContextState::measure_now(int timeout_ms) {
    uint64_t target;
    {
        std::lock_guard<std::mutex> lock(measure_mu_);
        // A measurement under way may have read the counters before this call.
        target = measures_done_ + (measuring_ ? 2 : 1);
    }
    request_measure();
    std::unique_lock<std::mutex> lock(measure_mu_);
    return measure_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return measures_done_ >= target; });
}

void ContextState::relieve_ring_pressure(CUstream stream, uint64_t stream_key) {
    InTool guard;
    if (!active_ || paused_) return;
    bool relieve, measure;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        relieve = fill_.needs_relief();
        measure = fill_.measure_due();
        if (measure) fill_.requested();
    }
    ++pressure_counts_.asked;
    if (!relieve) {
        if (measure) request_measure();
        return;
    }
    std::unique_lock<std::mutex> pressure(pressure_mu_, std::try_to_lock);
    if (!pressure.owns_lock()) return;  // another thread is relieving
    ++pressure_counts_.relieve;
    auto still_full = [&] {
        if (!measure_now(1000)) return true;
        std::lock_guard<std::mutex> lock(launch_mu_);
        return fill_.needs_relief();
    };
    // A drain in progress frees what it holds.
    if (windows_drained_.load() < windows_cut_.load()) {
        ++pressure_counts_.waited;
        if (!wait_for_drains(5000))
            GPUOBS_LOG("device %u: a drain took over 5 s while a launching thread waited for it; going on",
                       device_index_);
        if (!still_full()) return;
    } else if (!still_full()) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        // Other streams have launches in flight: their work is not this thread's
        // to wait for. Their records are dropped (and counted) if the ring fills.
        if (unsynced_streams_.size() != 1 || unsynced_streams_.count(stream_key) == 0) {
            ++pressure_counts_.other_streams;
            return;
        }
    }
    // Never on a stream being captured (its launches do not run; a sync would end
    // the capture), and in the relaxed capture mode, so that another thread's
    // capture in the global mode is not invalidated by this synchronisation.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver().stream_is_capturing == nullptr || driver().stream_is_capturing(stream, &capturing) != CUDA_SUCCESS ||
        capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
        ++pressure_counts_.capturing;
        return;
    }
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool exchanged =
        driver().exchange_capture_mode != nullptr && driver().exchange_capture_mode(&mode) == CUDA_SUCCESS;
    const CUresult synced = driver().stream_synchronize(stream);
    if (exchanged) driver().exchange_capture_mode(&mode);
    if (synced != CUDA_SUCCESS) return;
    if (pressure_counts_.synced++ == 0)
        GPUOBS_LOG(
            "device %u: the program launched more blocks between synchronisations than the rings hold; "
            "gpuobs synchronises the launching stream when they fill, so that nothing is dropped",
            device_index_);
    // The quiet point's window is cut and drained before the program goes on.
    mark_synchronized(stream_key, "rings filling");
    wait_for_drains(5000);
    measure_now(1000);
}

void ContextState::log_pressure_counts() const {
    const PressureCounts& c = pressure_counts_;
    if (c.asked == 0) return;
    GPUOBS_LOG(
        "device %u ring pressure: %llu launches asked, %llu measurements, %llu reliefs; %llu waits for a drain, "
        "%llu left to other streams, %llu on a capturing stream, %llu synchronisations",
        device_index_, (unsigned long long)c.asked.load(), (unsigned long long)c.measured.load(),
        (unsigned long long)c.relieve.load(), (unsigned long long)c.waited.load(),
        (unsigned long long)c.other_streams.load(), (unsigned long long)c.capturing.load(),
        (unsigned long long)c.synced.load());
}

}  // namespace gpuobs
