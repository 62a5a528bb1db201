// Ring pressure: a program that launches far more blocks between quiet points
// than the rings hold (an autotuner's timing loops, a long eager stretch) would
// otherwise lose them as drops. The host plans each launch's share of a stripe
// into an estimate of the fullest stripe (ring_pressure.h), corrected by
// measurements of the claim counters that a thread of the tool's own takes, on
// its own stream: a launching thread never calls the driver for one (one that
// did, inside its launch, hung an 8-thread storm on the H200), and a long drain
// does not hold one up. Past half a stripe a launch asks for a measurement; past
// three quarters the launching thread, once its launch API call returns, waits
// for a drain in progress; if none is left to free room and its stream is the
// only one with launches in flight, all its own, it waits (2 s at most) for that
// stream to go idle: a quiet point, where the window is cut, and waits for that
// drain. The program waits only when its records would otherwise be dropped.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "pressure_valve.h"

#include "clocks.h"
#include "context_guard.h"
#include "cuda_driver.h"
#include "drainer.h"
#include "launch_log.h"
#include "log.h"
#include "notice.h"
#include "sanitizer_api.h"
#include "tool_kernels.h"

namespace gpuobs {

namespace {

bool records_blocks(uint32_t m) { return gpuobs_mode_has(m, GPUOBS_TRAIT_BLOCK_RECORDS); }
bool records_accesses(uint32_t m) { return gpuobs_mode_has(m, GPUOBS_TRAIT_ACCESS_RECORDS); }

// The planned per-stripe share of what was launched since the cut and has not
// started: `launched` blocks (or warps) against the claims made since the cut.
uint64_t unstarted_share(uint64_t launched, const std::vector<uint64_t>& claimed, uint64_t claims_at_cut,
                         uint32_t stripes) {
    const uint64_t total = sum_of(claimed);
    const uint64_t started = total > claims_at_cut ? total - claims_at_cut : 0;
    return stripe_share(launched > started ? launched - started : 0, stripes);
}

}  // namespace

void PressureValve::start(const DeviceArena& arena) {
    arena_ = &arena;
    std::lock_guard<std::mutex> lock(plan_mu_);
    fill_.per_stripe = arena.stripe_capacity;
    fill_.counts_plan = !records_accesses(config_.mode);
}

void PressureValve::reset_at_cut(uint64_t claims, uint64_t warp_claims) {
    std::lock_guard<std::mutex> lock(plan_mu_);
    blocks_since_cut_ = warps_since_cut_ = 0;
    claims_at_cut_ = claims;
    warp_claims_at_cut_ = warp_claims;
}

void PressureValve::advance_cut(uint64_t blocks, uint64_t warps, uint64_t claims, uint64_t warp_claims) {
    std::lock_guard<std::mutex> lock(plan_mu_);
    blocks_since_cut_ -= std::min(blocks_since_cut_, blocks);
    warps_since_cut_ -= std::min(warps_since_cut_, warps);
    claims_at_cut_ = claims;
    warp_claims_at_cut_ = warp_claims;
}

void PressureValve::release_snapshots(const std::vector<int>& slots) {
    if (slots.empty()) return;
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    for (int slot : slots) snapshots_[slot].held = false;
}

bool PressureValve::plan_blocks(const uint32_t grid[3], const uint32_t block[3]) {
    const uint32_t mode = config_.mode;
    const uint64_t stripe_capacity = arena_->stripe_capacity;
    const uint32_t stripe_count = arena_->stripe_count;
    const uint64_t blocks = grid_blocks(grid), warps = later_warps(blocks, block);
    // Rings of a few records per SM (a test's --capacity) are left to drop: a
    // quarter of one is no slack for the plan's guesses.
    if ((!records_blocks(mode) && !records_accesses(mode)) || stripe_capacity < 64) return false;
    std::lock_guard<std::mutex> lock(plan_mu_);
    blocks_since_cut_ += blocks;
    // The worst-case share paces waits and measurements; snapshots are spaced by the
    // even share (the worst case is 10x it for a 256-block grid, which spent the eight
    // slots on the first 32 of a 1,000-launch storm on the H100, 2026-12-06).
    uint64_t share = stripe_share(blocks, stripe_count), even = even_share(blocks, stripe_count);
    if (gpuobs_mode_has(mode, GPUOBS_TRAIT_WARP_ARRIVALS) && warps != 0) {
        // block_starts' arrivals ring, in records of the event ring's size.
        warps_since_cut_ += warps;
        share = std::max(share, stripe_share(warps, stripe_count) / GPUOBS_WARP_ARRIVALS_PER_EVENT);
        even = std::max(even, even_share(warps, stripe_count) / GPUOBS_WARP_ARRIVALS_PER_EVENT);
    }
    // Memory modes write an unknown number of records per block: the plan only
    // paces their measurements, and what is measured decides.
    fill_.plan(share);
    planned_even_ += even;
    return fill_.needs_relief() || fill_.measure_due();  // past half: a measurement at every launch
}

// The fullest stripe's undrained claims (each ring in records of the event
// ring's size), with the planned share of the blocks launched and not yet
// started; on the measuring thread, on its own stream.
bool PressureValve::measure_fill(Sanitizer_StreamHandle stream) {
    const bool starts = gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS);
    const uint32_t stripe_count = arena_->stripe_count;
    uint64_t planned_then, blocks_then, warps_then, claims_at_cut, warp_claims_at_cut;
    {
        std::lock_guard<std::mutex> lock(plan_mu_);
        planned_then = fill_.planned;
        blocks_then = blocks_since_cut_;
        warps_then = warps_since_cut_;
        claims_at_cut = claims_at_cut_;
        warp_claims_at_cut = warp_claims_at_cut_;
    }
    std::vector<uint64_t> claimed, warp_claimed, drained, warp_drained, dropped;
    drainer_.drained_views(&drained, &warp_drained);
    if (!read_claims(arena_->ctl->stripes, stripe_count, stream, drained, claims_on_low_half(config_.mode), &claimed,
                     &dropped) ||
        (starts &&
         !read_claims(arena_->ctl->warp_stripes, stripe_count, stream, warp_drained, true, &warp_claimed, &dropped)))
        return false;
    uint64_t fill = undrained_worst(claimed, drained);
    if (records_blocks(config_.mode)) fill += unstarted_share(blocks_then, claimed, claims_at_cut, stripe_count);
    if (starts) {
        const uint64_t warps = undrained_worst(warp_claimed, warp_drained) +
                               unstarted_share(warps_then, warp_claimed, warp_claims_at_cut, stripe_count);
        fill = std::max(fill, warps / GPUOBS_WARP_ARRIVALS_PER_EVENT);
    }
    std::lock_guard<std::mutex> lock(plan_mu_);
    fill_.measured_at(fill, planned_then);
    return true;
}

void PressureValve::measure_loop() {
    become_tool_thread();
    measure_stream_ = create_own_stream(ctx_);
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(measure_mu_);
            // Snapshots in flight are polled every 200 us; otherwise it sleeps until asked.
            auto polling = [this] { return snapshots_queued_.load() != 0 && !measuring_stopped_; };
            if (polling())
                measure_cv_.wait_for(lock, std::chrono::microseconds(200), [this] { return measure_requested_; });
            else
                measure_cv_.wait(lock, [&] { return measure_requested_ || polling(); });
            const bool asked = measure_requested_;
            measure_requested_ = false;
            if (measuring_stopped_) continue;  // the context is going: its stream may be gone
            if (!asked) {
                lock.unlock();
                poll_snapshots();
                continue;
            }
            measuring_ = true;
            measure_began_ns_ = monotonic_ns();
        }
        poll_snapshots();
        bool ok = false;
        if (measure_stream_ != nullptr) {
            CurrentContext current(ctx_);
            ok = current.pushed && measure_fill(measure_stream_);
        }
        // Three failures in a row (not a context going away) turn relief off.
        failed_measures_ = ok || measuring_stopped_ ? 0 : failed_measures_ + 1;
        if (ok) {
            ++counts_.measured;
        } else if (failed_measures_ >= 3 && !measuring_broken_.exchange(true)) {
            // Without readings the estimate never falls: relief would synchronise at
            // every launch. Left to drops (counted) instead, said once.
            GPUOBS_LOG(
                "device %u: cannot read the rings' claim counters on the measuring thread; rings that fill "
                "drop what they cannot hold",
                device_index_);
        }
        {
            std::lock_guard<std::mutex> lock(measure_mu_);
            ++measures_done_;
            measuring_ = false;
        }
        measure_cv_.notify_all();
    }
}

void PressureValve::stop() {
    std::unique_lock<std::mutex> lock(measure_mu_);
    measuring_stopped_ = true;
    measure_cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return !measuring_; });
}

void PressureValve::request_measure() {
    if (measuring_stopped_) return;
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
                measuring_broken_ = true;
            }
        }
    }
    measure_cv_.notify_all();
}

void PressureValve::remeasure_after_drain() {
    bool started;
    {
        std::lock_guard<std::mutex> lock(measure_mu_);
        started = measure_thread_started_;
    }
    if (started) request_measure();
}

bool PressureValve::measure_now(int timeout_ms) {
    if (measuring_stopped_ || measuring_broken_) return false;
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

// A measurement under way for longer than for_ns: its copy waits behind work
// the GPU will not finish soon (a kernel spinning on a host flag), and asking
// again would only wait as long.
bool PressureValve::measurement_stuck(uint64_t for_ns) {
    std::lock_guard<std::mutex> lock(measure_mu_);
    return measuring_ && monotonic_ns() - measure_began_ns_ > for_ns;
}

// Polled, not synchronised: the stream's work may wait on something this thread
// does after its launch (a host-written flag, an event it records later), and a
// tool that waited for it forever would hang the program.
PressureValve::StreamWait PressureValve::wait_for_stream(CUstream stream, int timeout_ms) {
    CudaDriver& d = driver();
    if (d.stream_query == nullptr) return StreamWait::kUnknown;
    const uint64_t deadline = monotonic_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        const CUresult r = d.stream_query(stream);
        if (r == CUDA_SUCCESS) return StreamWait::kIdle;
        if (r != CUDA_ERROR_NOT_READY) return StreamWait::kUnknown;
        if (monotonic_ns() > deadline) return StreamWait::kBusy;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

void PressureValve::ask_for_measurement() {
    if (measuring_broken_ || measuring_stopped_) return;
    {
        std::lock_guard<std::mutex> lock(plan_mu_);
        fill_.requested();
    }
    request_measure();
}

void PressureValve::relieve(CUstream stream, uint64_t stream_key) {
    InTool guard;
    // At the first launch, out of the driver's locks: the drain's stream and buffer
    // are made beside the program, not at its first window.
    // A plain load first: every launch passes here, and an exchange would write the
    // flag's line from every launching thread.
    if (!drain_warmed_.load(std::memory_order_relaxed) && !drain_warmed_.exchange(true)) drainer_.warm_up();
    if (measuring_broken_ || measuring_stopped_) return;
    bool wait, measure, can_sync = false;
    uint64_t in_flight = 0;
    {
        std::lock_guard<std::mutex> lock(plan_mu_);
        wait = fill_.must_wait();
        measure = fill_.measure_due() || fill_.needs_relief();
        if (measure) fill_.requested();
    }
    ++counts_.asked;
    if (!config_.lossless) {
        // The design's rule: drop rather than disturb timing. The rings drain behind
        // snapshots; what does not fit meanwhile is dropped, counted.
        maybe_snapshot(stream, stream_key);
        if (measure) request_measure();
        return;
    }
    if (!wait) {
        if (measure) request_measure();
        return;
    }
    launches_.relief_state(stream_key, &can_sync, &in_flight);
    std::unique_lock<std::mutex> pressure(relief_mu_, std::try_to_lock);
    if (!pressure.owns_lock()) return;  // another thread is relieving
    ++counts_.relieve;
    // A drain in progress frees what it holds once its copies are done; one that
    // ran past 5 s (its copies may wait behind the program's work) is not waited
    // for again until it has released.
    const uint64_t released = drainer_.windows_released();
    const bool draining = released < drainer_.windows_cut() && released >= stuck_release_.load();
    if (!draining && !can_sync) {
        ++counts_.other_streams;
        request_measure();
        return;
    }
    if (can_sync && measurement_stuck(1000000000ull)) {
        // The measurement under way began over 1 s ago: its copy is held behind
        // work the GPU will not finish soon (a kernel spinning on a host flag).
        give_up_on_stream(stream_key, "a measurement of the rings has not returned for over 1 s");
        return;
    }
    // Once a stream was given up on, this program is one whose streams can wait
    // on its threads: later waits for a measurement or a stream are kept short.
    const bool wary = counts_.gave_up.load() != 0;
    // From here the launching thread waits: counted, for the notice.
    struct Waited {
        Counts& c;
        uint64_t from = monotonic_ns();
        ~Waited() {
            ++c.waits;
            c.waited_ns += monotonic_ns() - from;
        }
    } waited{counts_};
    if (draining) {
        ++counts_.waited;
        if (!drainer_.wait_for_release(5000)) {
            stuck_release_ = drainer_.windows_cut();
            GPUOBS_LOG("device %u: a drain took over 5 s while a launching thread waited for it; going on",
                       device_index_);
        }
        if (!can_sync) {
            request_measure();
            return;
        }
    }
    if (!measure_now(wary ? 20 : 1000)) {
        // The tool's own stream did not answer: the GPU is held by work that may
        // wait on this very thread. A relief that waited again at every launch
        // would stall the program a second a launch; the stream is given up on.
        give_up_on_stream(stream_key, "a measurement of the rings did not return within 1 s");
        return;
    }
    {
        std::lock_guard<std::mutex> lock(plan_mu_);
        if (!fill_.needs_relief()) return;
    }
    // Never on a stream being captured (its launches do not run; a sync would end
    // the capture), and in the relaxed capture mode, so that another thread's
    // capture in the global mode is not invalidated by this wait or the cut.
    if (!stream_not_capturing(stream)) {
        ++counts_.capturing;
        return;
    }
    const RelaxedCapture relaxed;
    const StreamWait idle = wait_for_stream(stream, wary ? 20 : 2000);
    if (idle != StreamWait::kIdle) {
        give_up_on_stream(stream_key, idle == StreamWait::kBusy
                                          ? "the launching stream was still busy after 2 s while its rings were "
                                            "filling (its work may wait on this thread)"
                                          : "the launching stream cannot be queried");
        return;
    }
    // The quiet point's window is cut (unless another thread launched on this
    // stream meanwhile) and released before the program goes on; a drain that
    // already kept a relief waiting 5 s is not waited for again.
    if (make_quiet_point_(stream_key, in_flight, LaunchLog::thread_tag()) && counts_.synced++ == 0)
        GPUOBS_LOG(
            "device %u: the program launched more blocks between synchronisations than the rings hold; "
            "gpuobs synchronises the launching stream when they fill, so that nothing is dropped",
            device_index_);
    const uint64_t released_now = drainer_.windows_released();
    if (released_now < drainer_.windows_cut() && released_now >= stuck_release_.load())
        if (!drainer_.wait_for_release(5000)) stuck_release_ = drainer_.windows_cut();
    measure_now(wary ? 20 : 1000);
}

// Queued on the program's stream, behind everything it has launched (it is the only
// stream with launches in flight, all of them this thread's): a copy of the launch
// counters and the control block, then an event. When the event completes, every
// launch listed before it has ended and the copy holds exactly their claims and
// counts: a quiet point the program did not have to wait for (Drainer::cut_at_snapshot).
void PressureValve::maybe_snapshot(CUstream stream, uint64_t stream_key) {
    if (arena_ == nullptr || arena_->snapshot_count == 0) {
        ++counts_.no_snapshots;
        return;
    }
    uint64_t planned;
    {
        std::lock_guard<std::mutex> lock(plan_mu_);
        planned = planned_even_;
        if (planned - planned_at_snapshot_ < snapshot_spacing(arena_->stripe_capacity)) return;
    }
    uint64_t launches = 0;
    if (!launches_.snapshot_point(stream_key, &launches)) {
        ++counts_.not_alone;
        return;
    }
    uint32_t slot;
    {
        std::lock_guard<std::mutex> lock(snapshot_mu_);
        slot = next_snapshot_;
        if (snapshots_[slot].queued || snapshots_[slot].held) {
            ++counts_.no_slot;  // every slot waits for the device or the drain
            return;
        }
    }
    // In the relaxed capture mode, and never on a stream being captured (the kernel
    // would become part of the program's graph).
    const RelaxedCapture relaxed;
    if (!stream_not_capturing(stream)) {
        ++counts_.capturing;
        return;
    }
    // The tool's kernels are loaded on the program's thread, here if no quiet point
    // did it before (a tool thread's first load of them failed on the H200).
    kernels_.load();
    CurrentContext current(ctx_);
    const uint64_t seq = ++snapshot_seq_;  // this thread alone queues
    if (!current.pushed || !kernels_.queue_snapshot(stream, *arena_, slot, seq)) {
        if (counts_.enqueue_failed++ == 0)
            GPUOBS_LOG("device %u: cannot queue an in-stream snapshot (%s)", device_index_,
                       current.pushed ? "the snapshot kernel did not launch" : "the context cannot be made current");
        return;
    }
    {
        std::lock_guard<std::mutex> lock(snapshot_mu_);
        Snapshot& s = snapshots_[slot];
        s.seq = seq;
        s.launches = launches;
        s.stream_key = stream_key;
        s.queued = true;
        next_snapshot_ = (slot + 1) % DeviceArena::kSnapshots;
    }
    {
        std::lock_guard<std::mutex> lock(plan_mu_);
        planned_at_snapshot_ = planned;
    }
    ++counts_.snapshots;
    ++snapshots_queued_;
    request_measure();  // wakes the measuring thread, which polls the snapshot
}

// The oldest snapshots whose kernels have published, cut in order (each read is 8
// bytes on the measuring thread's own stream, which waits for no other).
void PressureValve::poll_snapshots() {
    while (snapshots_queued_.load() != 0 && measure_stream_ != nullptr) {
        Snapshot s;
        uint32_t slot;
        {
            std::lock_guard<std::mutex> lock(snapshot_mu_);
            slot = oldest_snapshot_;
            s = snapshots_[slot];
        }
        if (!s.queued) return;
        uint64_t published = 0;
        if (sanitizer().memcpy_dtoh(&published, arena_->snapshot_published(slot), sizeof published, measure_stream_) !=
                SANITIZER_SUCCESS ||
            published != s.seq)
            return;
        const bool cut = drainer_.cut_at_snapshot((int)slot, s.launches, s.stream_key);
        ++(cut ? counts_.snapshot_cuts : counts_.snapshots_late);
        {
            std::lock_guard<std::mutex> lock(snapshot_mu_);
            snapshots_[slot].queued = false;
            snapshots_[slot].held = cut;
            oldest_snapshot_ = (slot + 1) % DeviceArena::kSnapshots;
        }
        --snapshots_queued_;
    }
}

// Not waited on again until the program synchronises it; said once.
void PressureValve::give_up_on_stream(uint64_t stream_key, const char* why) {
    launches_.give_up_on(stream_key);
    if (counts_.gave_up++ == 0)
        GPUOBS_LOG(
            "device %u: %s; gpuobs goes on without a quiet point of its own, and what does not fit in the rings "
            "is dropped (counted)",
            device_index_, why);
}

// The notice, and under GPUOBS_DEBUG what the pressure path did.
void PressureValve::report_program_waits() {
    note_program_waits();
    if (std::getenv("GPUOBS_DEBUG")) log_counts();
}

void PressureValve::note_program_waits() {
    const Counts& c = counts_;
    // Written again (totals so far) when there were waits since the last one: a
    // gpuobs.flush() may note them before the run's end.
    const uint64_t waits = c.waits.load();
    if (waits == 0 || waits_noted_.exchange(waits) == waits) return;
    char text[400];
    std::snprintf(
        text, sizeof text,
        "device %u: to make room in the rings, the program's launching threads have waited %llu times so far, "
        "%.1f ms in all (%llu of them for a stream synchronisation gpuobs made: quiet points the program did not "
        "make); host timings in this recording include those waits",
        device_index_, (unsigned long long)waits, c.waited_ns.load() / 1e6, (unsigned long long)c.synced.load());
    write_notice(file_, GPUOBS_NOTICE_PROGRAM_WAITED, device_index_, text);
}

void PressureValve::log_counts() const {
    const Counts& c = counts_;
    if (c.asked == 0) return;
    GPUOBS_LOG(
        "device %u ring pressure: %llu launches asked, %llu measurements, %llu reliefs; %llu waits for a drain, "
        "%llu left to other streams, %llu on a capturing stream, %llu synchronisations, %llu given up; "
        "%llu in-stream snapshots, %llu cut, %llu too late, %llu skipped with every slot in use (%llu without "
        "snapshot slots, %llu with other streams or threads in flight, %llu not queued)",
        device_index_, (unsigned long long)c.asked.load(), (unsigned long long)c.measured.load(),
        (unsigned long long)c.relieve.load(), (unsigned long long)c.waited.load(),
        (unsigned long long)c.other_streams.load(), (unsigned long long)c.capturing.load(),
        (unsigned long long)c.synced.load(), (unsigned long long)c.gave_up.load(),
        (unsigned long long)c.snapshots.load(), (unsigned long long)c.snapshot_cuts.load(),
        (unsigned long long)c.snapshots_late.load(), (unsigned long long)c.no_slot.load(),
        (unsigned long long)c.no_snapshots.load(), (unsigned long long)c.not_alone.load(),
        (unsigned long long)c.enqueue_failed.load());
}

}  // namespace gpuobs
