// A context's flush: a window cut at a quiet point (cut_window: where the
// claims stand, which launches it holds), then drained on the context's drain
// thread (drain_window: its records out of the device's rings, flagged and
// filtered, joined by the launches the host never saw and by each launch's
// count, written to the recording), while kernels go on recording past the cut.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <time.h>
#include <unordered_set>
#include <vector>

#include "drainer.h"

#include "clocks.h"
#include "context_guard.h"
#include "late_ends.h"
#include "launch_counts.h"
#include "launch_log.h"
#include "log.h"
#include "pressure_valve.h"
#include "ring_cut.h"
#include "sampler.h"
#include "sanitizer_api.h"
#include "tool_kernels.h"
#include "warp_slots.h"

namespace gpuobs {
namespace {

// Flush windows are numbered per GPU for the whole process, not per context: a
// context made after a device reset (or a second context on the same GPU) must
// not reuse another's numbers, since the reader keys each window's launch counts
// and events on (device_index, flush_seq).
uint32_t next_flush_seq(uint32_t device_index) {
    static std::atomic<uint32_t> by_device[64];
    static std::atomic<uint32_t> beyond_the_table{0};  // shared by the rest: still unique on each
    return device_index < std::size(by_device) ? by_device[device_index]++ : beyond_the_table++;
}

// The drain's copies out of the rings, through a pinned host buffer (the
// sanitizer's copies into pageable memory moved about 400 MB/s on the H200: 84.6
// ms for 524k records), or straight into pageable memory where none can be had.
// The memsets go on the same stream, after the copies of the same records.
class RingCopier {
public:
    RingCopier(Sanitizer_StreamHandle stream, char* pinned, size_t pinned_bytes)
        : stream_(stream), pinned_(pinned), cap_(pinned_bytes) {}
    void copy(void* host, void* device, size_t bytes) {
        char* to = static_cast<char*>(host);
        char* from = static_cast<char*>(device);
        while (pinned_ != nullptr && bytes != 0) {
            const size_t n = std::min(bytes, cap_);
            if (sanitizer().memcpy_dtoh(pinned_, from, n, stream_) == SANITIZER_SUCCESS) {
                std::memcpy(to, pinned_, n);
            } else {
                std::memset(to, 0, n);  // not read: the records read as unwritten (incomplete)
            }
            to += n, from += n, bytes -= n;
        }
        if (bytes != 0 && sanitizer().memcpy_dtoh(to, from, bytes, stream_) != SANITIZER_SUCCESS)
            std::memset(to, 0, bytes);
    }
    void zero(void* device, size_t bytes) { sanitizer().memset(device, 0, bytes, stream_); }

private:
    Sanitizer_StreamHandle stream_;
    char* pinned_;
    size_t cap_;
};

struct Drained {
    uint64_t attempted = 0, dropped = 0, dropped_inside = 0;  // summed over stripes (see RingCut)
};

// Each stripe's positions claimed before the cut, out of the ring into out, and
// zeroed on the device: a record's kind byte (and block_trace's end and exit
// count, which exits add onto) must read as unwritten when the ring comes round
// to it again. The stripe's limit then moves one lap past the cut (the caller
// uploads RingState::limits). stripe_starts: where each stripe's records begin
// in out (stripes + 1 positions).
template <typename Record>
Drained drain_ring(RingState& ring, Record* device, uint64_t per_stripe, const std::vector<uint64_t>& claimed,
                   const std::vector<uint64_t>& dropped, RingCopier& copier, std::vector<Record>& out,
                   std::vector<size_t>* stripe_starts) {
    Drained d;
    std::vector<RingCut> cuts(claimed.size());
    size_t total = 0;
    for (size_t s = 0; s < claimed.size(); ++s) {
        cuts[s] = plan_ring_cut(ring.drained[s], claimed[s], dropped[s], ring.dropped_seen[s], per_stripe);
        total += cuts[s].to - cuts[s].from;
    }
    out.clear();
    out.resize(total);  // sized once: the copies land at fixed places
    stripe_starts->assign(1, 0);
    size_t o = 0;
    for (size_t s = 0; s < claimed.size(); ++s) {
        const RingCut& c = cuts[s];
        Record* stripe = device + s * per_stripe;
        for_each_run(c.from, c.to, per_stripe, [&](uint64_t at, uint64_t n) {
            copier.copy(&out[o], stripe + at, n * sizeof(Record));
            copier.zero(stripe + at, n * sizeof(Record));
            o += n;
        });
        stripe_starts->push_back(o);
        d.attempted += c.attempted;
        d.dropped += c.dropped;
        d.dropped_inside += c.dropped_inside;
        ring.drained[s] = c.cut;
        ring.dropped_seen[s] = std::max(dropped[s], ring.dropped_seen[s]);
    }
    return d;
}

}  // namespace

// Each stripe's claim and drop counters (positions so far), read from the device.
bool read_claims(gpuobs_stripe* device, uint32_t count, Sanitizer_StreamHandle stream,
                 const std::vector<uint64_t>& drained, bool low_half_only, std::vector<uint64_t>* claimed,
                 std::vector<uint64_t>* dropped) {
    std::vector<gpuobs_stripe> stripes(count);
    if (sanitizer().memcpy_dtoh(stripes.data(), device, count * sizeof(gpuobs_stripe), stream) != SANITIZER_SUCCESS)
        return false;
    for (uint32_t s = 0; s < count; ++s) {
        claimed->push_back(claims_from_counter(stripes[s].claimed, s < drained.size() ? drained[s] : 0, low_half_only));
        dropped->push_back(stripes[s].dropped);
    }
    return true;
}

bool read_sampled_out(gpuobs_stripe* device, Sanitizer_StreamHandle stream, uint64_t* total) {
    std::vector<gpuobs_stripe> lines(GPUOBS_MAX_STRIPES);
    if (sanitizer().memcpy_dtoh(lines.data(), device, lines.size() * sizeof(gpuobs_stripe), stream) !=
        SANITIZER_SUCCESS)
        return false;
    *total = 0;
    for (const gpuobs_stripe& l : lines) *total += l.sampled_out;
    return true;
}

uint64_t sum_of(const std::vector<uint64_t>& v) {
    uint64_t total = 0;
    for (uint64_t x : v) total += x;
    return total;
}

void Drainer::start(const DeviceArena& arena) {
    arena_ = &arena;
    event_ring_.reset(arena.stripe_count);
    arrival_ring_.reset(arena.stripe_count);
    counter_baseline_.assign(GPUOBS_LAUNCH_TABLE_SIZE, 0);
    std::lock_guard<std::mutex> lock(drained_mu_);
    drained_view_ = event_ring_.drained;
    warp_drained_view_ = arrival_ring_.drained;
}

void Drainer::drained_views(std::vector<uint64_t>* events, std::vector<uint64_t>* arrivals) {
    std::lock_guard<std::mutex> lock(drained_mu_);
    *events = drained_view_;
    *arrivals = warp_drained_view_;
}

// Classify: staging_'s events flagged, and filtered in place; info counts what was left out.
void Drainer::classify_events(const std::vector<uint8_t>& selected, const std::vector<gpuobs_launch>& launches,
                              gpuobs_flush_info& info) {
    // Keep complete events that pass the kernel filter, in place. A block
    // event whose exits were not all counted is flagged, never dropped.
    size_t kept = 0;
    for (gpuobs_event& e : staging_) {
        if (e.kind == GPUOBS_EVENT_BLOCK && e.time_end != 0) {
            if (e.exit_count > e.thread_index) {
                e.flags |= GPUOBS_BLOCK_END_UNCONFIRMED;
                ++info.unconfirmed_ends;
            } else if (e.exit_count < e.thread_index) {
                e.flags |= GPUOBS_BLOCK_EARLY_EXITS;
            }
        }
        // block_starts events have no end: the host bounds it.
        const bool unended = e.kind == GPUOBS_EVENT_BLOCK && e.time_end == 0 &&
                             !gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_BOUNDED_ENDS);
        if (e.kind == GPUOBS_EVENT_EMPTY || unended) {
            ++info.incomplete;
        } else if (e.function_slot < selected.size() && !selected[e.function_slot]) {
            ++info.filtered;
        } else {
            staging_[kept++] = e;
        }
    }
    staging_.resize(kept);
    // Ends that the same block's next run stamped without overshooting its exit count.
    const unsigned threads = (unsigned)std::min<size_t>(kFoldThreads, 1 + staging_.size() / 262144);
    info.unconfirmed_ends += flag_ends_past_next_run(staging_, rerun_grids(launches), threads);
}

// Write: the window's launches, its flush record with the launch counts, and its events.
void Drainer::write_flush_chunks(const std::vector<gpuobs_launch>& launches,
                                 const std::vector<gpuobs_launch_count>& counts, gpuobs_flush_info& info,
                                 const gpuobs_sampling_info& sampling) {
    uint64_t bytes = 0;
    if (!launches.empty())
        bytes += file_.write_table_chunk(GPUOBS_CHUNK_LAUNCHES, {nullptr, 0},
                                         {launches.data(), launches.size() * sizeof(gpuobs_launch)},
                                         sizeof(gpuobs_launch), &pack_buffers_);
    info.launch_count_len = (uint32_t)counts.size();
    bytes += file_.write_table_chunk(GPUOBS_CHUNK_FLUSH, {&info, sizeof info},
                                     {counts.data(), counts.size() * sizeof(gpuobs_launch_count)},
                                     sizeof(gpuobs_launch_count), &pack_buffers_);
    if (gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS))
        bytes += file_.write_chunk(GPUOBS_CHUNK_SLOTS, {{&slots_info_, sizeof slots_info_}});
    if (writes_records(config_.mode)) bytes += file_.write_chunk(GPUOBS_CHUNK_SAMPLING, {{&sampling, sizeof sampling}});
    if (!staging_.empty()) {
        // The records were charged when claimed; the chunk's header and padding were not.
        const uint64_t written =
            file_.write_events(device_index_, info.flush_seq, staging_.data(), (uint32_t)staging_.size());
        const uint64_t records = (uint64_t)staging_.size() * sizeof(gpuobs_event);
        bytes += written > records ? written - records : 0;
    }
    table_bytes_ += bytes;
}

// Cut: the launches since the last window, and where every stripe's claims stand.
// At a quiet point the claims are read before the launches are taken and no
// launch may come between (else the next quiet point cuts instead, at the cost of
// this small read): every claim below the cut is then of a block that has ended,
// and every claim of a later launch is above it. A flush that is not quiet cuts
// wherever the claims are (launches still running spill into the next window).
bool Drainer::cut_window(const char* reason, bool require_quiet, FlushWindow* w, const SnapshotCut& at) {
    uint64_t launches_before;
    if (!launches_.may_cut(require_quiet, &launches_before)) return false;
    w->reason = reason;
    w->quiet = require_quiet || at.slot >= 0;  // a snapshot is exact as a quiet point
    w->host_time_ns = monotonic_ns();
    const uint64_t cut_started_ns = w->host_time_ns;
    w->snapshot = at.slot;
    if (at.slot >= 0) w->snapshot_slots.push_back(at.slot);
    // The tool's kernels are loaded here, in the program's synchronising thread
    // (the drain thread's first load of them failed on the H200); a snapshot's cut
    // runs on the tool's measuring thread, where the program's relief point loaded them.
    if (at.slot < 0) kernels_.load();
    if (config_.patches_needed()) {
        // On a stream of the tool's own: a copy on the context's NULL stream would wait
        // for the program's work on blocking streams (a cut that is not quiet would
        // synchronise the program), and would break another thread's capture there.
        const Sanitizer_StreamHandle stream = cut_stream();
        std::vector<uint64_t> drained, warp_drained;  // what the claims are widened from
        drained_views(&drained, &warp_drained);
        const DeviceArena& a = *arena_;
        gpuobs_control* ctl = at.slot >= 0 ? a.snapshot_control((uint32_t)at.slot) : a.ctl;
        if (!read_claims(ctl->stripes, a.stripe_count, stream, drained, claims_on_low_half(config_.mode), &w->claimed,
                         &w->dropped) ||
            (writes_records(config_.mode) && !read_sampled_out(ctl->stripes, stream, &w->sampled_out)) ||
            sanitizer().memcpy_dtoh(&w->unmatched_exit_threads, &ctl->unmatched_exit_threads,
                                    sizeof w->unmatched_exit_threads, stream) != SANITIZER_SUCCESS) {
            GPUOBS_LOG("flush (%s): cannot read the claim counters; the window stays open", reason);
            return false;
        }
        w->cut_claims_ns = monotonic_ns() - cut_started_ns;
        if (gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS)) {
            if (!read_claims(ctl->warp_stripes, a.stripe_count, stream, warp_drained, true, &w->warp_claimed,
                             &w->warp_dropped))
                return false;
            // Every launch of this window has run: a device time read now bounds each
            // of their blocks' ends (not at a snapshot: later launches run by now).
            if (require_quiet && at.slot < 0) w->device_quiet_ns = kernels_.device_time_now(stream);
        }
        // Graph nodes' slots come back at their next replay: their totals now, before
        // the program launches again (take_window refuses a launch listed since).
        if (require_quiet && at.slot < 0) {
            const uint64_t slots_started_ns = monotonic_ns();
            std::vector<uint32_t> slots;
            launches_.pending_graph_slots(&slots);
            if (!slots.empty() && !kernels_.harvest_slots(a.counters, stream, slots, &w->cut_totals))
                w->cut_totals.clear();
            w->cut_slots_ns = monotonic_ns() - slots_started_ns;
        }
    }
    uint64_t raced = 0;
    w->cut_ns = monotonic_ns() - cut_started_ns;
    if (at.slot >= 0) return launches_.take_window_upto(at.launches, at.stream_key, w);
    if (!launches_.take_window(require_quiet, launches_before, w, &raced)) return false;
    if (raced != 0 && !raced_reported_) {
        GPUOBS_LOG(
            "flush (%s) on device %u cut %llu launches that may still run; their counts may be partial "
            "(flagged in the launch table)",
            reason, device_index_, (unsigned long long)raced);
        raced_reported_ = true;
    }
    return true;
}

void Drainer::sample_clock() {
    gpuobs_clock_sample sample;
    if (kernels_.sample_clock(device_index_, drain_stream(), &sample))
        file_.write_chunk(GPUOBS_CHUNK_CLOCK, {{&sample, sizeof sample}});
}

// Launches run wholly in a device duty cycle's off time, settled as unrecorded
// (launch_counts.h: settle_off_time says which stay, and why).
void Drainer::settle_duty_off_time(FlushWindow& w, std::vector<gpuobs_launch_count>* counts, gpuobs_flush_info* info) {
    // A snapshot's totals were read behind its launches, before any later one ran: as exact as a quiet cut's.
    std::unordered_set<uint32_t> lent_now = slots_lent_to_later(w.launches, *counts, w.quiet || w.snapshot >= 0);
    info->unrecorded_launches += settle_off_time(&w.launches, counts, staging_, slots_lent_);
    slots_lent_.swap(lent_now);
}

void Drainer::drain_window(FlushWindow& w) {
    const uint64_t drain_started_ns = monotonic_ns();
    // Stage times for GPUOBS_DEBUG: the copies out of the rings (and the limits
    // raised), the host's fold and classification, the counter harvest, the file write.
    uint64_t copy_ns = 0, classify_ns = 0, harvest_ns = 0, write_ns = 0;
    gpuobs_flush_info info;
    std::memset(&info, 0, sizeof info);
    info.device_index = device_index_;
    info.flush_seq = next_flush_seq(device_index_);  // numbered at drain: merged windows are one flush
    info.host_time_ns = w.host_time_ns;
    info.unrecorded_launches = w.unrecorded;
    // A clock sample at the first flush and then at most once a second.
    if (config_.clock_probe && monotonic_ns() - last_clock_sample_ns_ > 1000000000ull) {
        sample_clock();
        last_clock_sample_ns_ = monotonic_ns();
    }
    std::memset(&slots_info_, 0, sizeof slots_info_);
    slots_info_.device_index = device_index_;
    slots_info_.flush_seq = info.flush_seq;
    slots_info_.device_quiet_ns = w.device_quiet_ns;
    gpuobs_sampling_info sampling;
    std::memset(&sampling, 0, sizeof sampling);
    sampling.device_index = device_index_;
    sampling.flush_seq = info.flush_seq;
    sampling.sampled_out = w.sampled_out > sampled_out_seen_ ? w.sampled_out - sampled_out_seen_ : 0;
    sampled_out_seen_ = std::max(sampled_out_seen_, w.sampled_out);
    if (sampler_ != nullptr) sampler_->fill_window(&sampling);
    std::vector<gpuobs_launch_count> counts;
    uint64_t arrivals_dropped_inside = 0;
    if (config_.patches_needed()) {
        const DeviceArena& a = *arena_;
        const Sanitizer_StreamHandle stream = drain_stream();
        const uint64_t copy_started_ns = monotonic_ns();
        RingCopier copier(stream, pinned_host(), kPinnedBytes);
        std::vector<size_t> event_stripes, arrival_stripes;
        const Drained events = drain_ring(event_ring_, a.events, a.stripe_capacity, w.claimed, w.dropped, copier,
                                          staging_, &event_stripes);
        info.attempted = events.attempted;
        info.dropped = events.dropped;
        info.recorded = events.attempted - std::min(events.attempted, events.dropped);
        info.unmatched_exit_threads =
            w.unmatched_exit_threads > unmatched_seen_ ? w.unmatched_exit_threads - unmatched_seen_ : 0;
        unmatched_seen_ = std::max(unmatched_seen_, w.unmatched_exit_threads);
        if (gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS)) {
            const Drained arrivals = drain_ring(arrival_ring_, a.arrivals, a.arrivals_per_stripe(), w.warp_claimed,
                                                w.warp_dropped, copier, arrival_staging_, &arrival_stripes);
            slots_info_.warp_arrivals = arrivals.attempted;
            slots_info_.warp_arrivals_dropped = arrivals.dropped;
            arrivals_dropped_inside = arrivals.dropped_inside;
        }
        // The freed positions zeroed (the memsets above), then the limits raised
        // past them, in this order on one stream; the read back waits for both.
        // (The host arrays live until the read back: the copies are asynchronous.)
        std::vector<uint64_t> limits = event_ring_.limits(a.stripe_capacity);
        sanitizer().memcpy_htod_async(a.ctl->limits, limits.data(), a.stripe_count * sizeof(uint64_t), stream);
        std::vector<uint64_t> warp_limits;
        if (gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS)) {
            warp_limits = arrival_ring_.limits(a.arrivals_per_stripe());
            sanitizer().memcpy_htod_async(a.ctl->warp_limits, warp_limits.data(), a.stripe_count * sizeof(uint64_t),
                                          stream);
        }
        uint32_t check;
        sanitizer().memcpy_dtoh(&check, a.ctl, sizeof check, stream);
        {
            std::lock_guard<std::mutex> lock(drained_mu_);  // what fill checks measure against
            drained_view_ = event_ring_.drained;
            warp_drained_view_ = arrival_ring_.drained;
        }
        // The rings have room again: a launching thread waiting on this drain goes
        // on now, not after the records are classified and written.
        windows_released_.store(release_target_);
        copy_ns = monotonic_ns() - copy_started_ns;
        const uint64_t classify_started_ns = monotonic_ns();
        valve_.remeasure_after_drain();
        if (gpuobs_mode_has(config_.mode, GPUOBS_TRAIT_WARP_ARRIVALS)) {
            // A thread per 64k arrivals, up to kFoldThreads: a small window (one per
            // synchronisation in a stepping program) is not worth starting threads for.
            const unsigned threads = (unsigned)std::min<size_t>(kFoldThreads, 1 + arrival_staging_.size() / 65536);
            fold_warp_arrivals(staging_, event_stripes, arrival_staging_, arrival_stripes, &slots_info_, threads);
            // Arrivals dropped under an older limit left their positions unwritten: dropped, not unmatched.
            slots_info_.unmatched_arrivals -= std::min(slots_info_.unmatched_arrivals, arrivals_dropped_inside);
        }
        // Device-launched grids first: their records get their own function
        // slot there, which the kernel filter then judges them by.
        launches_.list_device_launches(staging_, &w.launches);
        classify_events(w.selected, w.launches, info);
        // Positions dropped under an older limit were never written: not incomplete.
        info.incomplete -= (uint32_t)std::min<uint64_t>(info.incomplete, events.dropped_inside);
        classify_ns = monotonic_ns() - classify_started_ns;
        const uint64_t harvest_started_ns = monotonic_ns();
        // A snapshot's window takes the totals its kernel harvested behind its launches.
        bool harvested;
        if (w.snapshot >= 0) {
            counter_staging_.assign(GPUOBS_LAUNCH_TABLE_SIZE, 0);
            harvested = sanitizer().memcpy_dtoh(counter_staging_.data(), a.snapshot_totals((uint32_t)w.snapshot),
                                                DeviceArena::kSnapshotTotals, stream) == SANITIZER_SUCCESS;
        } else {
            harvested = kernels_.harvest_counts(a.counters, stream, &counter_staging_);
        }
        harvest_ns = monotonic_ns() - harvest_started_ns;
        if (harvested)  // launch_counts.h: each slot's growth to its launch
            attribute_counts(
                {w.launches, w.cut_totals, w.launches_end, w.snapshot >= 0}, counter_staging_, counter_baseline_,
                [this](uint64_t n, const std::vector<uint32_t>& s, std::unordered_set<uint32_t>* o) {
                    launches_.listed_after(n, s, o);
                },
                w.quiet, &counts, &info.unattributed);
        else
            GPUOBS_LOG("flush %u (%s): cannot read the launch counters; this window's counts are lost", info.flush_seq,
                       w.reason);
    }
    if (arena_ != nullptr && arena_->duty.period != 0) settle_duty_off_time(w, &counts, &info);
    const uint64_t write_started_ns = monotonic_ns();
    write_flush_chunks(w.launches, counts, info, sampling);
    write_ns = monotonic_ns() - write_started_ns;
    if (std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG(
            "flush %u (%s): attempted %llu recorded %llu dropped %llu sampled out %llu kept %zu; cut %.3f ms ago, "
            "drained in %.3f ms (copy %.3f, classify %.3f, harvest %.3f, write %.3f); the cut took %.3f ms "
            "(claims %.3f, graph slots %.3f)",
            info.flush_seq, w.reason, (unsigned long long)info.attempted, (unsigned long long)info.recorded,
            (unsigned long long)info.dropped, (unsigned long long)sampling.sampled_out, staging_.size(),
            (drain_started_ns - w.host_time_ns) / 1e6, (monotonic_ns() - drain_started_ns) / 1e6, copy_ns / 1e6,
            classify_ns / 1e6, harvest_ns / 1e6, write_ns / 1e6, w.cut_ns / 1e6, w.cut_claims_ns / 1e6,
            w.cut_slots_ns / 1e6);
}

// Drains every window cut so far, in order: the quiet windows a busy program
// cuts while a drain runs (one per synchronisation) wait for the next drain,
// which takes them together (their launches in order, the last one's cut), so
// a drain's cost does not grow with how often the program synchronises.
void Drainer::drain_loop() {
    std::lock_guard<std::mutex> flush_lock(flush_mu_);
    for (;;) {
        FlushWindow w;
        uint64_t taken = 0;
        {
            std::lock_guard<std::mutex> lock(queue_mu_);
            if (queue_.empty()) return;
            w = std::move(queue_.front());
            queue_.pop_front();
            // Which windows merge: launch_counts.h, merges_with_next.
            for (taken = 1; !queue_.empty() && merges_with_next(w.quiet, w.snapshot >= 0, queue_.front().quiet);
                 ++taken) {
                FlushWindow& next = queue_.front();
                merge_cut_totals(w.cut_totals, next.launches, &next.cut_totals);
                next.launches.insert(next.launches.begin(), w.launches.begin(), w.launches.end());
                next.unrecorded += w.unrecorded;
                next.snapshot_slots.insert(next.snapshot_slots.begin(), w.snapshot_slots.begin(),
                                           w.snapshot_slots.end());
                w = std::move(next);
                queue_.pop_front();
            }
        }
        release_target_ = windows_drained_.load() + taken;
        {
            CurrentContext current(ctx_);  // the tool's kernels (clock, counter harvest) need it
            drain_window(w);
        }
        valve_.release_snapshots(w.snapshot_slots);
        windows_drained_ += taken;
        if (windows_released_.load() < release_target_) windows_released_.store(release_target_);
        {
            std::lock_guard<std::mutex> lock(queue_mu_);  // a waiter checks under this lock
        }
        queue_cv_.notify_all();
    }
}

// A non-blocking stream of the tool's own in this context, as the sanitizer
// names it (its copies take that handle); null when it cannot be made.
Sanitizer_StreamHandle create_own_stream(CUcontext ctx) {
    CurrentContext current(ctx);
    CUstream s = nullptr;
    Sanitizer_StreamHandle handle = nullptr;
    if (current.pushed && sanitizer().get_stream_handle != nullptr &&
        driver().stream_create(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
        sanitizer().get_stream_handle(ctx, s, &handle) != SANITIZER_SUCCESS)
        handle = nullptr;
    return handle;
}

// The cut's stream (under cut_mu_, on the cutting thread); the NULL stream if
// none can be made.
Sanitizer_StreamHandle Drainer::cut_stream() {
    if (!cut_stream_tried_) {
        cut_stream_tried_ = true;
        cut_stream_ = create_own_stream(ctx_);
    }
    return cut_stream_ != nullptr ? cut_stream_ : arena_->stream;
}

// Made once, by the drain thread as it starts (warm_up) or by whichever thread
// drains first; another that asks meanwhile waits for it.
char* Drainer::pinned_host() {
    std::call_once(pinned_once_, [this] {
        void* p = nullptr;
        if (sanitizer().alloc_host != nullptr && sanitizer().alloc_host(ctx_, &p, kPinnedBytes) == SANITIZER_SUCCESS)
            pinned_ = static_cast<char*>(p);
        else
            GPUOBS_LOG("no pinned host memory for the drain; it copies into pageable memory, more slowly");
    });
    return pinned_;
}

Sanitizer_StreamHandle Drainer::drain_stream() {
    std::call_once(drain_stream_once_, [this] {
        drain_stream_ = create_own_stream(ctx_);
        if (drain_stream_ == nullptr) GPUOBS_LOG("no stream of its own for the drain; it copies on the NULL stream");
    });
    return drain_stream_ != nullptr ? drain_stream_ : arena_->stream;
}

namespace {

// Until `done` reaches `cut` (windows the drain has released or written), polled
// every pause_ns; false past timeout_ms.
bool wait_for_windows(const std::atomic<uint64_t>& done, const std::atomic<uint64_t>& cut, int timeout_ms,
                      long pause_ns) {
    const uint64_t deadline = monotonic_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (done.load() < cut.load()) {
        if (monotonic_ns() > deadline) return false;
        timespec pause{0, pause_ns};
        nanosleep(&pause, nullptr);
    }
    return true;
}

}  // namespace

bool Drainer::wait_for_release(int timeout_ms) const {
    return wait_for_windows(windows_released_, windows_cut_, timeout_ms, 50000);
}

bool Drainer::wait_for_drains(int timeout_ms) const {
    return wait_for_windows(windows_drained_, windows_cut_, timeout_ms, 1000000);
}

// One thread per context moves cut windows into the file, so that a program's
// synchronising thread only pays for the cut. If the thread cannot start,
// windows are drained by the thread that cuts them.
void Drainer::start_drain_thread() {
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        if (drain_thread_started_) return;
        drain_thread_started_ = true;
    }
    watch_drains_on_crash(this);
    try {
        std::thread([this] {
            become_tool_thread();
            if (config_.patches_needed()) {  // what the first drain would otherwise stop to make
                CurrentContext current(ctx_);
                if (current.pushed) {
                    drain_stream();
                    pinned_host();
                }
            }
            for (;;) {
                {
                    std::unique_lock<std::mutex> lock(queue_mu_);
                    queue_cv_.wait(lock, [this] { return !queue_.empty(); });
                }
                drain_loop();
            }
        }).detach();
    } catch (const std::exception& e) {
        GPUOBS_LOG("cannot start the drain thread (%s); flushes drain where they are cut", e.what());
        drain_thread_failed_ = true;
    }
}

void Drainer::flush(const char* reason, bool require_quiet) {
    InTool guard;
    // A quiet flush that finds another cut in progress leaves the work to it and
    // to the next quiet point: threads that synchronise never queue behind each other.
    std::unique_lock<std::mutex> cut_lock(cut_mu_, std::defer_lock);
    if (require_quiet) {
        if (!cut_lock.try_lock()) return;
    } else {
        cut_lock.lock();
    }
    FlushWindow w;
    if (!cut_window(reason, require_quiet, &w)) return;
    queue_window(std::move(w), cut_lock, !require_quiet);
}

bool Drainer::cut_at_snapshot(int slot, uint64_t launches, uint64_t stream_key) {
    InTool guard;
    std::unique_lock<std::mutex> cut_lock(cut_mu_);
    FlushWindow w;
    if (!cut_window("in-stream snapshot", false, &w, SnapshotCut{slot, launches, stream_key})) return false;
    queue_window(std::move(w), cut_lock, false);
    return true;
}

// The window joins the queue in cut order, then the cut lock goes (the drain must
// not hold up the next cut); the drain thread takes it, or this thread when the
// caller must wait for the file (or there is no drain thread).
void Drainer::queue_window(FlushWindow&& w, std::unique_lock<std::mutex>& cut_lock, bool wait_for_drain) {
    uint64_t mine;
    {
        std::lock_guard<std::mutex> lock(queue_mu_);
        queue_.push_back(std::move(w));
        mine = ++windows_cut_;
    }
    cut_lock.unlock();
    if (!wait_for_drain) start_drain_thread();
    if (wait_for_drain || drain_thread_failed_) {
        drain_loop();  // this window, and any cut before it, in the file before returning
        std::unique_lock<std::mutex> lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return windows_drained_ >= mine; });
    } else {
        queue_cv_.notify_all();
    }
}

}  // namespace gpuobs
