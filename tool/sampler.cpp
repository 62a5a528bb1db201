// The sampler's thread and its rule (sampler.h says what it keeps and why).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "sampler.h"

#include "clocks.h"
#include "context_guard.h"
#include "drainer.h"
#include "log.h"
#include "sanitizer_api.h"

namespace gpuobs {

void Sampler::start(const DeviceArena& arena) {
    arena_ = &arena;
    if (!writes_records(config_.mode)) return;
    // Lossless asks for every record: no budget (a duty cycle, asked for as well, is kept).
    budget_ = config_.lossless ? 0 : config_.budget_bytes_per_s;
    // The burst: what may be recorded at once above the budget, a minute of budget but
    // no more than the rings hold (more would only be dropped while the drain catches
    // up); a small test ring does not make it small.
    const uint64_t ring = arena.stripe_capacity * arena.stripe_count * sizeof(gpuobs_event);
    burst_ = std::min(budget_ * 60, std::max<uint64_t>(ring, 256ull << 20));
    // A duty cycle the patches keep on the device's clock is not this thread's to turn.
    if (arena.duty.period == 0) {
        duty_on_ns_ = config_.duty_on_ns;
        duty_period_ns_ = config_.duty_period_ns;
    }
    if (budget_ == 0 && duty_period_ns_ == 0) return;
    try {
        thread_ = std::thread([this] { loop(); });
    } catch (const std::exception& e) {
        GPUOBS_LOG("device %u: cannot start the sampler (%s); the data budget and the duty cycle are not kept",
                   device_index_, e.what());
    }
}

void Sampler::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void Sampler::fill_window(gpuobs_sampling_info* info) {
    info->budget_bytes_per_s = budget_;
    info->burst_bytes = budget_ != 0 ? burst_ : 0;
    if (arena_ != nullptr && arena_->duty.period != 0) {
        info->duty_on_ns = arena_->duty.on_ns();
        info->duty_period_ns = arena_->duty.period_ns();
        info->flags |= GPUOBS_SAMPLING_DUTY_ON_DEVICE;
    } else {
        info->duty_on_ns = duty_on_ns_;
        info->duty_period_ns = duty_period_ns_;
    }
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t now = monotonic_ns();
    info->gate_closed_ns = closed_ns_ + (closed_ ? now - closed_since_ns_ : 0);
    info->gate_turns = turns_;
    closed_ns_ = 0;
    turns_ = 0;
    if (closed_) closed_since_ns_ = now;
}

// Every record claimed so far, in bytes: the events' claims (each stripe's
// counter, widened from what was drained) and block_starts' warp arrivals, plus
// what the flushes wrote around them (launch tables, flush records): at a
// server's rate those tables are ~0.3% of the file, and a budget is of the file.
bool Sampler::recorded_bytes(Sanitizer_StreamHandle stream, uint64_t* bytes) {
    std::vector<uint64_t> drained, warp_drained, claimed, dropped, warp_claimed;
    drainer_.drained_views(&drained, &warp_drained);
    const bool low = claims_on_low_half(config_.mode);
    if (!read_claims(arena_->ctl->stripes, arena_->stripe_count, stream, drained, low, &claimed, &dropped))
        return false;
    *bytes = sum_of(claimed) * sizeof(gpuobs_event);
    if (gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS)) {
        if (!read_claims(arena_->ctl->warp_stripes, arena_->stripe_count, stream, warp_drained, true, &warp_claimed,
                         &dropped))
            return false;
        *bytes += sum_of(warp_claimed) * sizeof(gpuobs_warp_arrival);
    }
    *bytes += drainer_.table_bytes();
    return true;
}

// The gate's word written on the sampler's stream, then read back: the turn is
// on the device when this returns (the copies run beside the program's kernels).
bool Sampler::write_gate(Sanitizer_StreamHandle stream, uint32_t value) {
    uint32_t back = ~value;
    return sanitizer().memcpy_htod_async(&arena_->ctl->sample_gate, &value, sizeof value, stream) ==
               SANITIZER_SUCCESS &&
           sanitizer().memcpy_dtoh(&back, &arena_->ctl->sample_gate, sizeof back, stream) == SANITIZER_SUCCESS &&
           back == value;
}

void Sampler::loop() {
    become_tool_thread();
    CurrentContext current(ctx_);
    const Sanitizer_StreamHandle stream = current.pushed ? create_own_stream(ctx_) : nullptr;
    if (stream == nullptr) {
        GPUOBS_LOG("device %u: the sampler has no stream of its own; the data budget and the duty cycle are not kept",
                   device_index_);
        return;
    }
    SampleRule rule(budget_, burst_, duty_on_ns_, duty_period_ns_, monotonic_ns());
    uint64_t recorded = 0, failed_reads = 0;
    for (;;) {
        const uint64_t now = monotonic_ns();
        uint64_t bytes = recorded;
        if (budget_ == 0 || recorded_bytes(stream, &bytes))
            recorded = bytes;
        else
            ++failed_reads;
        const bool want = rule.open_at(now, recorded);  // closed_ is this thread's to write
        if (want == closed_ && write_gate(stream, want ? 0 : GPUOBS_SAMPLE_GATE_OUT)) {
            std::lock_guard<std::mutex> lock(mu_);
            const uint64_t at = monotonic_ns();
            closed_ = !want;
            if (closed_) {
                closed_since_ns_ = at;
                ++turns_;
            } else {
                closed_ns_ += at - closed_since_ns_;
            }
        }
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::nanoseconds(rule.next_check_ns(monotonic_ns(), !closed_)),
                         [this] { return stopping_; }))
            break;
    }
    if (failed_reads != 0 && std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG("device %u: the sampler could not read the claims %llu times", device_index_,
                   (unsigned long long)failed_reads);
}

}  // namespace gpuobs
