// A context's flush: the device's events and counts since the last one read
// (read_device_events), flagged and filtered (classify_events), joined by the
// launches the host never saw and by each launch's count, written to the
// recording (write_flush_chunks); then the device buffers are reset.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "context_guard.h"
#include "context_state.h"
#include "log.h"
#include "notice.h"
#include "sanitizer_api.h"
#include "warp_slots.h"

namespace gpuobs {
namespace {

// Each stripe's claimed records (at most per_stripe of them) copied from the
// device array into out, each stripe's count into used, and the stripes'
// claims and drops added up: for the events and for block_starts' arrivals.
template <typename Record>
void copy_stripes(const gpuobs_stripe* stripes, uint32_t stripe_count, Record* device, uint64_t per_stripe,
                  Sanitizer_StreamHandle stream, std::vector<Record>& out, std::vector<uint64_t>& used,
                  uint64_t* claimed, uint64_t* dropped) {
    out.clear();
    used.assign(stripe_count, 0);
    for (uint32_t s = 0; s < stripe_count; ++s) {
        const uint64_t n = std::min(stripes[s].claimed, per_stripe);
        *claimed += stripes[s].claimed;
        *dropped += stripes[s].dropped;
        used[s] = n;
        if (n == 0) continue;
        const size_t at = out.size();
        out.resize(at + n);
        sanitizer().memcpy_dtoh(&out[at], device + s * per_stripe, n * sizeof(Record), stream);
    }
}

// The records each stripe used zeroed again (their kind byte or end reads as unwritten).
template <typename Record>
void zero_used(Record* device, uint64_t per_stripe, const std::vector<uint64_t>& used, Sanitizer_StreamHandle stream) {
    for (size_t s = 0; s < used.size(); ++s)
        if (used[s] != 0) sanitizer().memset(device + s * per_stripe, 0, used[s] * sizeof(Record), stream);
}

}  // namespace

// Grids launched by kernels (dynamic parallelism): the host never saw them,
// and the sanitizer hands them the callback data of the kernel that launched
// them (seen on the H200), so each record's function is found from its pc and
// corrected in place; one launch is listed per such grid id.
void ContextState::list_device_launches(std::vector<gpuobs_event>& events, std::vector<gpuobs_launch>* launches) {
    // Most flushes hold no device-launched grid: the host's launch ids and the lock
    // on code_ranges_ (which launching threads also take) are only needed once one shows.
    std::unordered_set<uint64_t> known;
    std::unique_lock<std::mutex> lock(launch_mu_, std::defer_lock);
    std::map<uint64_t, gpuobs_launch> found;  // grid id -> launch, in grid id order
    for (gpuobs_event& e : events) {
        if (!gpuobs_grid_from_device(e.grid_id)) continue;
        if (!lock.owns_lock()) {
            for (const gpuobs_launch& l : *launches) known.insert(l.grid_id);
            lock.lock();
        }
        if (known.count(e.grid_id)) continue;
        auto code = code_ranges_.upper_bound(e.pc);
        if (e.pc != 0 && code != code_ranges_.begin() && e.pc < std::prev(code)->second.first)
            e.function_slot = std::prev(code)->second.second;
        auto [it, fresh] = found.try_emplace(e.grid_id);
        gpuobs_launch& l = it->second;
        if (fresh) {
            std::memset(&l, 0, sizeof l);
            l.grid_id = e.grid_id;
            l.function_slot = e.function_slot;
            l.device_index = device_index_;
            l.flags = GPUOBS_LAUNCH_FROM_DEVICE;
            l.block[1] = l.block[2] = 1;
        }
        l.grid[0] = std::max<uint32_t>(l.grid[0], e.block_x + 1);
        l.grid[1] = std::max<uint32_t>(l.grid[1], (uint32_t)e.block_y + 1);
        l.grid[2] = std::max<uint32_t>(l.grid[2], (uint32_t)e.block_z + 1);
        if (e.kind == GPUOBS_EVENT_BLOCK)
            l.block[0] = std::max<uint32_t>(l.block[0], e.thread_index);
        else
            l.block[0] = std::max<uint32_t>(l.block[0], (uint32_t)e.thread_index + 1);
    }
    for (auto& [grid, l] : found) {
        l.launch_id = next_launch_id();
        launches->push_back(l);
    }
    if (!found.empty() && !device_launch_noticed_) {
        device_launch_noticed_ = true;
        write_notice(file_, GPUOBS_NOTICE_DEVICE_LAUNCHES, device_index_,
                     "kernels launched grids from the device (dynamic parallelism): those grids are listed from "
                     "their records; the blocks of a kernel that launches grids are not recorded (the sanitizer gives "
                     "its callback data to the grids it launches, and none to it)");
    }
}

void ContextState::write_launch_counts(const std::vector<gpuobs_launch>& launches,
                                       std::vector<gpuobs_launch_count>* out, uint64_t* unattributed) {
    // Which launches of this window map to each counter slot.
    std::map<uint32_t, std::map<uint64_t, uint32_t>> by_slot;  // slot -> grid id -> launches
    for (const gpuobs_launch& l : launches) ++by_slot[gpuobs_launch_slot(l.grid_id)][l.grid_id];
    for (uint32_t s = 0; s < GPUOBS_LAUNCH_TABLE_SIZE; ++s) {
        const uint64_t total = counter_staging_[s];
        auto it = by_slot.find(s);
        if (it == by_slot.end()) {
            *unattributed += total;
            continue;
        }
        uint32_t sharing = 0;
        for (const auto& g : it->second) sharing += g.second;
        for (const auto& g : it->second) {
            gpuobs_launch_count c;
            std::memset(&c, 0, sizeof c);
            c.grid_id = g.first;
            c.count = total;
            c.launches_sharing = sharing;
            out->push_back(c);
        }
    }
}

void ContextState::reset_device_buffers(const std::vector<uint64_t>& used_per_stripe) {
    sanitizer().memset(&ctl_->stripes[0], 0, sizeof(gpuobs_stripe) * stripe_count_, stream_);
    sanitizer().memset(&ctl_->unmatched_exit_threads, 0, sizeof(uint64_t), stream_);
    // block_trace stamps ends and exit counts with atomics onto zeros: clear the
    // events this window used, and the block table, whose slots point into them
    // (a graph replayed in the next window reuses its grid ids, so a stale slot
    // would match).
    if (config_.mode == GPUOBS_MODE_BLOCK_TRACE) {
        sanitizer().memset(block_table_, 0, (size_t)GPUOBS_BLOCK_TABLE_SIZE * sizeof(gpuobs_block_slot), stream_);
        zero_used(events_, stripe_capacity_, used_per_stripe, stream_);
    }
    // block_starts: an arrival reads as written by its kind byte, so the ones used are zeroed.
    if (config_.mode == GPUOBS_MODE_BLOCK_STARTS) {
        sanitizer().memset(&ctl_->warp_stripes[0], 0, sizeof(gpuobs_stripe) * stripe_count_, stream_);
        zero_used(arrivals_, arrivals_per_stripe(), arrivals_used_, stream_);
    }
    uint32_t check;
    sanitizer().memcpy_dtoh(&check, ctl_, sizeof check, stream_);  // returns once the resets are done
}

// Read: the control block, then each stripe's claimed events into staging_; the
// window's accounting goes into info, and each stripe's event count into used (for
// the reset). False when the control block cannot be read.
bool ContextState::read_device_events(const char* reason, gpuobs_flush_info& info, std::vector<uint64_t>& used) {
    gpuobs_control ctl;
    if (sanitizer().memcpy_dtoh(&ctl, ctl_, sizeof ctl, stream_) != SANITIZER_SUCCESS) {
        GPUOBS_LOG("flush (%s): cannot read the control block; this window's events are lost", reason);
        return false;
    }
    copy_stripes(ctl.stripes, stripe_count_, events_, stripe_capacity_, stream_, staging_, used, &info.attempted,
                 &info.dropped);
    info.recorded = staging_.size();
    if (info.recorded + info.dropped != info.attempted)
        GPUOBS_LOG("flush %u: accounting mismatch: recorded %llu + dropped %llu != attempted %llu", info.flush_seq,
                   (unsigned long long)info.recorded, (unsigned long long)info.dropped,
                   (unsigned long long)info.attempted);
    info.unmatched_exit_threads = ctl.unmatched_exit_threads;
    if (config_.mode == GPUOBS_MODE_BLOCK_STARTS) read_warp_arrivals(ctl);
    return true;
}

// block_starts: each stripe's warp arrivals into arrival_staging_, folded into
// the window's block events as their slot masks.
void ContextState::read_warp_arrivals(const gpuobs_control& ctl) {
    copy_stripes(ctl.warp_stripes, stripe_count_, arrivals_, arrivals_per_stripe(), stream_, arrival_staging_,
                 arrivals_used_, &slots_info_.warp_arrivals, &slots_info_.warp_arrivals_dropped);
    fold_warp_arrivals(staging_, arrival_staging_, &slots_info_);
}

// Classify: staging_'s events flagged, and filtered in place; info counts what was left out.
void ContextState::classify_events(const std::vector<uint8_t>& selected, gpuobs_flush_info& info) {
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
        const bool unended =
            e.kind == GPUOBS_EVENT_BLOCK && e.time_end == 0 && config_.mode != GPUOBS_MODE_BLOCK_STARTS;
        if (e.kind == GPUOBS_EVENT_EMPTY || unended) {
            ++info.incomplete;
        } else if (e.function_slot < selected.size() && !selected[e.function_slot]) {
            ++info.filtered;
        } else {
            staging_[kept++] = e;
        }
    }
    staging_.resize(kept);
}

// Write: the window's launches, its flush record with the launch counts, and its events.
void ContextState::write_flush_chunks(const std::vector<gpuobs_launch>& launches,
                                      const std::vector<gpuobs_launch_count>& counts, gpuobs_flush_info& info) {
    if (!launches.empty())
        file_.write_chunk(GPUOBS_CHUNK_LAUNCHES, {{launches.data(), launches.size() * sizeof(gpuobs_launch)}});
    info.launch_count_len = (uint32_t)counts.size();
    file_.write_chunk(GPUOBS_CHUNK_FLUSH,
                      {{&info, sizeof info}, {counts.data(), counts.size() * sizeof(gpuobs_launch_count)}});
    if (config_.mode == GPUOBS_MODE_BLOCK_STARTS)
        file_.write_chunk(GPUOBS_CHUNK_SLOTS, {{&slots_info_, sizeof slots_info_}});
    if (!staging_.empty())
        file_.write_events(device_index_, info.flush_seq, staging_.data(), (uint32_t)staging_.size());
}

void ContextState::flush(const char* reason, bool require_quiet) {
    InTool guard;
    // A flush at a quiet point that finds another one running leaves the work to
    // it and to the next quiet point: threads that synchronise never queue
    // behind each other's flushes (a launch storm from 8 threads did, at 6x).
    std::unique_lock<std::mutex> flush_lock(flush_mu_, std::defer_lock);
    if (require_quiet) {
        if (!flush_lock.try_lock()) return;
    } else {
        flush_lock.lock();
    }
    if (!active_ || destroyed_) return;
    std::vector<gpuobs_launch> launches;
    std::vector<uint8_t> selected;
    uint64_t launches_at_start, unrecorded;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        if (require_quiet && !unsynced_streams_.empty()) return;
        launches.swap(pending_launches_);
        unrecorded = unrecorded_launches_;
        unrecorded_launches_ = 0;
        selected = function_selected_;
        launches_at_start = launches_total_;
    }
    gpuobs_flush_info info;
    std::memset(&info, 0, sizeof info);
    info.device_index = device_index_;
    info.flush_seq = flush_seq_++;
    info.host_time_ns = monotonic_ns();
    info.unrecorded_launches = unrecorded;
    std::vector<gpuobs_launch_count> counts;
    // A clock sample at the first flush and then at most once a second.
    if (config_.clock_probe && info.host_time_ns - last_clock_sample_ns_ > 1000000000ull) {
        sample_clock();
        last_clock_sample_ns_ = info.host_time_ns;
    }
    std::memset(&slots_info_, 0, sizeof slots_info_);
    slots_info_.device_index = device_index_;
    slots_info_.flush_seq = info.flush_seq;
    // block_starts: at a quiet point every launch listed in this window has run,
    // so a device time read now bounds the end of each of their blocks.
    if (config_.mode == GPUOBS_MODE_BLOCK_STARTS && require_quiet) slots_info_.device_quiet_ns = device_time_now();
    if (config_.mode != GPUOBS_MODE_OFF) {
        std::vector<uint64_t> used;
        if (!read_device_events(reason, info, used)) return;
        // A launch since the quiet check may have blocks running now, half
        // written: a quiet flush leaves everything on the device for the next
        // quiet point instead of cutting them off. (The storm's lost block ends,
        // first thought to be this, came from block-table sharing; see the
        // schema's gpuobs_block_table_slot.)
        if (require_quiet) {
            std::lock_guard<std::mutex> lock(launch_mu_);
            if (launches_total_ != launches_at_start) {
                pending_launches_.insert(pending_launches_.begin(), launches.begin(), launches.end());
                unrecorded_launches_ += unrecorded;
                --flush_seq_;
                return;
            }
        }
        // Device-launched grids first: their records get their own function
        // slot there, which the kernel filter then judges them by.
        list_device_launches(staging_, &launches);
        classify_events(selected, info);
        if (harvest_counts())
            write_launch_counts(launches, &counts, &info.unattributed);
        else
            GPUOBS_LOG("flush %u (%s): cannot read the launch counters; this window's counts are lost", info.flush_seq,
                       reason);
        reset_device_buffers(used);
    }
    write_flush_chunks(launches, counts, info);
    {
        // A launch that slipped in while this flush read and reset the device may
        // have lost part of its events or counts: flag it rather than hide it.
        std::lock_guard<std::mutex> lock(launch_mu_);
        if (launches_total_ != launches_at_start) {
            for (gpuobs_launch& l : pending_launches_) l.flags |= GPUOBS_LAUNCH_RACED_FLUSH;
            if (!raced_reported_) {
                GPUOBS_LOG(
                    "a launch raced a flush on device %u; its counts may be partial (flagged in the launch table)",
                    device_index_);
                raced_reported_ = true;
            }
        }
    }
    if (std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG("flush %u (%s): attempted %llu recorded %llu dropped %llu kept %zu", info.flush_seq, reason,
                   (unsigned long long)info.attempted, (unsigned long long)info.recorded,
                   (unsigned long long)info.dropped, staging_.size());
}

}  // namespace gpuobs
