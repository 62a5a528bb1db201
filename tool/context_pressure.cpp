// Ring pressure: a program that launches far more blocks between quiet points
// than the rings hold (an autotuner's timing loops, a long eager stretch) would
// otherwise lose them as drops. The host plans each launch's blocks into the
// window (ring_pressure.h); when the plan says a stripe may be filling, the
// launching thread, once its launch is enqueued, asks the drain thread to read
// the claim counters (a launching thread makes no driver call for it: one that
// did hung an 8-thread storm on the H200). Past half a stripe, the next launch
// waits for a drain in progress, and if that is not enough and its stream is the
// only one with launches in flight, it synchronises that stream: a quiet point,
// where the window is cut and drained as at any other.
// The program's thread waits only when its records would otherwise be dropped.
#include <mutex>
#include <vector>

#include "context_guard.h"
#include "context_state.h"
#include "log.h"
#include "ring_pressure.h"
#include "sanitizer_api.h"

namespace gpuobs {

namespace {

bool records_blocks(uint32_t m) { return m == GPUOBS_MODE_BLOCK_TRACE || m == GPUOBS_MODE_BLOCK_STARTS; }
bool records_accesses(uint32_t m) { return m == GPUOBS_MODE_MEM_SAMPLED || m == GPUOBS_MODE_MEM_FULL; }

uint64_t claimed_since(const std::vector<uint64_t>& claimed, uint64_t at_cut) {
    const uint64_t total = sum_of(claimed);
    return total > at_cut ? total - at_cut : 0;
}

}  // namespace

bool ContextState::plan_blocks(uint64_t blocks, uint64_t warps_per_block) {
    const uint32_t mode = config_.mode;
    if (!records_blocks(mode) && !records_accesses(mode)) return false;
    blocks_since_cut_ += blocks;
    if (mode == GPUOBS_MODE_BLOCK_STARTS && warps_per_block > 1) warps_since_cut_ += blocks * (warps_per_block - 1);
    // Memory modes write an unknown number of records per block: their checks
    // plan one per block, and the fill they measure decides.
    share_since_check_ += stripe_share(blocks, stripe_count_);
    if (next_check_share_ == 0) next_check_share_ = std::max<uint64_t>(stripe_capacity_ / 4, 1);
    if (share_since_check_ < next_check_share_) return false;
    share_since_check_ = 0;
    return true;
}

// How full the fullest stripe is (claims not yet drained), with the planned
// share of the blocks launched but not yet started; sets the next check. On the
// drain thread, on its own stream.
bool ContextState::measure_fill(Sanitizer_StreamHandle stream, bool* relieve) {
    const bool starts = config_.mode == GPUOBS_MODE_BLOCK_STARTS;
    std::vector<uint64_t> claimed, warp_claimed, drained, warp_drained, dropped;
    if (!read_claims(ctl_->stripes, stripe_count_, stream, &claimed, &dropped) ||
        (starts && !read_claims(ctl_->warp_stripes, stripe_count_, stream, &warp_claimed, &dropped)))
        return false;
    {
        std::lock_guard<std::mutex> lock(drained_mu_);
        drained = drained_view_;
        warp_drained = warp_drained_view_;
    }
    uint64_t coming = 0, warps_coming = 0;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        if (records_blocks(config_.mode)) {
            const uint64_t started = claimed_since(claimed, claims_at_cut_);
            coming = stripe_share(blocks_since_cut_ > started ? blocks_since_cut_ - started : 0, stripe_count_);
            const uint64_t warps_started = claimed_since(warp_claimed, warp_claims_at_cut_);
            warps_coming =
                stripe_share(warps_since_cut_ > warps_started ? warps_since_cut_ - warps_started : 0, stripe_count_);
        }
    }
    FillCheck f = check_fill(claimed, drained, coming, stripe_capacity_);
    if (starts) {
        const FillCheck w = check_fill(warp_claimed, warp_drained, warps_coming, arrivals_per_stripe());
        f.relieve |= w.relieve;
        f.next_check = std::min(f.next_check, std::max<uint64_t>(w.next_check / GPUOBS_WARP_ARRIVALS_PER_EVENT, 1));
    }
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        next_check_share_ = f.next_check;
    }
    *relieve = f.relieve;
    return true;
}

void ContextState::check_fill_on_drain_thread() {
    std::lock_guard<std::mutex> flush_lock(flush_mu_);  // drain_stream() is the drain's
    CurrentContext current(ctx_);
    bool relieve = false;
    if (current.pushed && measure_fill(drain_stream(), &relieve)) relieve_wanted_ = relieve;
}

// After a launch whose plan asked for a check: the drain thread is asked to read
// the fill, and the answer of the last check (relieve_wanted_) is acted on here.
// Past half a stripe the thread waits for a drain in progress (it frees what it
// holds); if none is left and this stream is the only one with launches in
// flight, it synchronises the stream: a quiet point, where the window is cut.
void ContextState::relieve_ring_pressure(CUstream stream, uint64_t stream_key) {
    InTool guard;
    if (!active_ || paused_) return;
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        fill_check_requested_ = true;
    }
    start_drain_thread();
    queue_cv_.notify_all();
    if (!relieve_wanted_.load()) return;
    std::unique_lock<std::mutex> pressure(pressure_mu_, std::try_to_lock);
    if (!pressure.owns_lock()) return;  // another thread is relieving
    if (windows_drained_.load() < windows_cut_.load()) {
        // The drain in progress frees what it holds; the next check says whether that was enough.
        if (!wait_for_drains(5000))
            GPUOBS_LOG("device %u: a drain took over 5 s while a launching thread waited for it; going on",
                       device_index_);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        // Other streams have launches in flight: their work is not this thread's
        // to wait for. Their records are dropped (and counted) if the ring fills.
        if (unsynced_streams_.size() != 1 || unsynced_streams_.count(stream_key) == 0) return;
    }
    // Never on a stream being captured (its launches do not run; a sync would end
    // the capture), and in the relaxed capture mode, so that another thread's
    // capture in the global mode is not invalidated by this synchronisation.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver().stream_is_capturing == nullptr || driver().stream_is_capturing(stream, &capturing) != CUDA_SUCCESS ||
        capturing != CU_STREAM_CAPTURE_STATUS_NONE)
        return;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool exchanged =
        driver().exchange_capture_mode != nullptr && driver().exchange_capture_mode(&mode) == CUDA_SUCCESS;
    const CUresult synced = driver().stream_synchronize(stream);
    if (exchanged) driver().exchange_capture_mode(&mode);
    if (synced != CUDA_SUCCESS) return;
    relieve_wanted_ = false;  // until the next check says otherwise
    if (pressure_syncs_++ == 0)
        GPUOBS_LOG(
            "device %u: the program launched more blocks between synchronisations than the rings hold; "
            "gpuobs synchronises the launching stream when they fill, so that nothing is dropped",
            device_index_);
    mark_synchronized(stream_key, "rings filling");
}

}  // namespace gpuobs
