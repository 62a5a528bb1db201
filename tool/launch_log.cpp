// A context's launch log (launch_log.h): function slots, the launches since the
// last cut, and the streams' synchronisation state that makes quiet points.
#include "launch_log.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "api_trace.h"
#include "clocks.h"
#include "cuda_driver.h"
#include "drainer.h"
#include "log.h"
#include "notice.h"
#include "pressure_valve.h"
#include "sanitizer_api.h"

namespace gpuobs {
namespace {

std::string demangle(const char* name) {
    if (name == nullptr) return "";
    int status = 0;
    char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (status != 0 || out == nullptr) return "";
    std::string s(out);
    std::free(out);
    return s;
}

}  // namespace

uint64_t next_launch_id() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

void LaunchLog::open() {
    std::lock_guard<std::mutex> lock(mu_);
    function_selected_.assign(GPUOBS_FUNCTION_TABLE_SIZE, 1);
    slot_last_listed_.assign(GPUOBS_LAUNCH_TABLE_SIZE, 0);
    open_ = true;
}

void LaunchLog::close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
}

uint32_t LaunchLog::function_slot_for(CUfunction f, const char* name, CUmodule module) {
    auto it = function_slots_.find(f);
    if (it != function_slots_.end()) return it->second.slot;
    uint32_t slot = std::min<uint32_t>(next_function_slot_++, GPUOBS_FUNCTION_TABLE_SIZE - 1);
    function_slots_.emplace(f, FunctionSlot{slot, module});
    std::string mangled = name ? name : "";
    std::string demangled = demangle(name);
    if (config_.has_kernel_filter && slot < function_selected_.size()) {
        const std::string& shown = demangled.empty() ? mangled : demangled;
        function_selected_[slot] = config_.kernel_filter.matches(shown) || config_.kernel_filter.matches(mangled);
    }
    gpuobs_function_info info;
    std::memset(&info, 0, sizeof info);
    info.function_slot = slot;
    info.device_index = device_index_;
    info.module_id = (uint64_t)module;
    info.mangled_len = (uint32_t)mangled.size();
    info.demangled_len = (uint32_t)demangled.size();
    file_.write_chunk(GPUOBS_CHUNK_FUNCTION,
                      {{&info, sizeof info}, {mangled.data(), mangled.size()}, {demangled.data(), demangled.size()}});
    uint64_t pc = 0, size = 0;
    if (!mangled.empty() &&
        sanitizer().function_pc_and_size(module, mangled.c_str(), &pc, &size) == SANITIZER_SUCCESS && size != 0)
        code_ranges_[pc] = {pc + size, slot};
    if (!config_.dump_patched_code.empty())
        dump_patched_code(config_.dump_patched_code, module, mangled, device_index_, slot, arena_.stream);
    if (config_.patches_needed() && !config_.launch_scope) {
        SanitizerResult r = sanitizer().set_callback_data(f, callback_data_now(slot));
        if (r != SANITIZER_SUCCESS)
            write_notice(file_, GPUOBS_NOTICE_FUNCTION_UNBOUND, device_index_,
                         "cannot bind callback data to " + mangled + ": " + sanitizer().describe(r) +
                             " (its events will be missing)");
    }
    return slot;
}

void LaunchLog::on_functions_loaded(CUmodule module, const CUfunction* functions, uint32_t count) {
    // The names are asked of the driver before the lock is taken: a thread
    // holding it must not wait on the driver, whose locks a launching thread
    // (which takes it in its callbacks) may hold.
    CudaDriver& d = driver();
    std::vector<const char*> names(count, nullptr);
    for (uint32_t i = 0; i < count; ++i)
        if (d.func_get_name == nullptr || d.func_get_name(&names[i], functions[i]) != CUDA_SUCCESS) names[i] = nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return;
    for (uint32_t i = 0; i < count; ++i) function_slot_for(functions[i], names[i], module);
}

void LaunchLog::on_module_unloading(CUmodule module) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = function_slots_.begin(); it != function_slots_.end();)
        it = it->second.module == module ? function_slots_.erase(it) : std::next(it);
}

bool LaunchLog::on_launch(const LaunchInfo& launch, bool paused) {
    const Sanitizer_LaunchData& ld = *launch.data;
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return false;
    // Paused launches still count toward quietness: a window turns only when
    // none is in flight.
    ++unsynced_streams_[launch.stream_key];
    note_launcher(launch.stream_key);
    launched_since_quiet_ = true;
    // A function first seen while paused gets its slot and callback data now,
    // ready for the next window.
    uint32_t slot = function_slot_for(ld.function, ld.functionName, ld.module);
    if (paused) {
        if (!launch.graph_node) ++unrecorded_launches_;  // replays count once, at on_paused_graph_launch
        return false;
    }
    if (config_.patches_needed() && config_.launch_scope && !launch.graph_node)
        sanitizer().set_launch_callback_data(ld.hLaunch, ld.function, ld.hStream,
                                             arena_.callback_data(slot, config_.sample_shift));
    gpuobs_launch l;
    std::memset(&l, 0, sizeof l);
    l.launch_id = next_launch_id();
    l.grid_id = ld.gridId;
    l.stream_id = launch.stream_key;
    l.host_begin_ns = monotonic_ns();
    l.function_slot = slot;
    l.device_index = device_index_;
    l.grid[0] = ld.gridDim_x;
    l.grid[1] = ld.gridDim_y;
    l.grid[2] = ld.gridDim_z;
    l.block[0] = ld.blockDim_x;
    l.block[1] = ld.blockDim_y;
    l.block[2] = ld.blockDim_z;
    l.graph_launch_id = launch.graph_launch_id;
    l.flags = (launch.graph_node ? GPUOBS_LAUNCH_GRAPH_NODE : 0) |
              (launch.conditional_body ? GPUOBS_LAUNCH_CONDITIONAL_BODY : 0);
    if (config_.api_trace) l.api_call_id = ApiTrace::current_call();
    list_launch(l);
    return valve_.plan_blocks(l.grid, l.block);
}

bool LaunchLog::on_graph_replay(const std::vector<LearnedNode>& nodes, uint64_t stream_key, uint32_t replay_id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return false;
    bool check = false;
    ++unsynced_streams_[stream_key];
    note_launcher(stream_key);
    launched_since_quiet_ = true;
    const uint64_t now = monotonic_ns();
    for (const LearnedNode& n : nodes) {
        gpuobs_launch l;
        std::memset(&l, 0, sizeof l);
        l.launch_id = next_launch_id();
        l.grid_id = n.grid_id;
        l.stream_id = stream_key;
        l.host_begin_ns = now;
        l.function_slot = function_slot_for(n.function, n.name.c_str(), n.module);
        l.device_index = device_index_;
        std::memcpy(l.grid, n.grid, sizeof l.grid);
        std::memcpy(l.block, n.block, sizeof l.block);
        l.graph_launch_id = replay_id;
        l.flags = GPUOBS_LAUNCH_GRAPH_NODE | GPUOBS_LAUNCH_FROM_NODE_TABLE;
        if (config_.api_trace) l.api_call_id = ApiTrace::current_call();
        list_launch(l);
        check |= valve_.plan_blocks(l.grid, l.block);
    }
    return check;
}

void LaunchLog::list_launch(const gpuobs_launch& l) {
    pending_launches_.push_back(l);
    ++launches_total_;
    if (!slot_last_listed_.empty()) slot_last_listed_[gpuobs_launch_slot(l.grid_id)] = launches_total_;
}

void* LaunchLog::callback_data_now(uint32_t slot) const {
    return armed_ ? arena_.callback_data(slot, config_.sample_shift) : nullptr;
}

void LaunchLog::bind_functions(bool armed) {
    std::lock_guard<std::mutex> lock(mu_);
    if (armed == armed_) return;
    armed_ = armed;
    if (!config_.patches_needed() || config_.launch_scope) return;
    const uint64_t t0 = monotonic_ns();
    uint32_t refused = 0;
    for (const auto& [f, fs] : function_slots_)
        if (sanitizer().set_callback_data(f, callback_data_now(fs.slot)) != SANITIZER_SUCCESS) ++refused;
    if (std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG("device %u: callback data %s %zu functions in %.3f ms (%u refused)", device_index_,
                   armed ? "given to" : "taken from", function_slots_.size(), (monotonic_ns() - t0) / 1e6, refused);
}

void LaunchLog::on_paused_graph_launch(uint64_t stream_key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return;
    ++unsynced_streams_[stream_key];
    note_launcher(stream_key);
    launched_since_quiet_ = true;
    ++unrecorded_launches_;
}

uintptr_t LaunchLog::thread_tag() {
    static thread_local char tag;  // its address names the calling thread
    return reinterpret_cast<uintptr_t>(&tag);
}

void LaunchLog::note_launcher(uint64_t stream_key) {
    const uintptr_t me = thread_tag();
    auto [it, fresh] = stream_launchers_.try_emplace(stream_key, me);
    if (!fresh && it->second != me) it->second = kSharedStream;
}

bool LaunchLog::alone_in_flight(uint64_t stream_key) const {
    return unsynced_streams_.size() == 1 && unsynced_streams_.count(stream_key) &&
           launcher_of(stream_key) == thread_tag();
}

uintptr_t LaunchLog::launcher_of(uint64_t stream_key) const {
    auto it = stream_launchers_.find(stream_key);
    return it == stream_launchers_.end() ? 0 : it->second;
}

LaunchLog::Synced LaunchLog::stream_synchronized(uint64_t stream_key, uint64_t expected_in_flight,
                                                 uintptr_t expected_launcher) {
    Synced s;
    std::lock_guard<std::mutex> lock(mu_);
    if (expected_in_flight != 0) {
        auto it = unsynced_streams_.find(stream_key);
        if (it == unsynced_streams_.end() || it->second != expected_in_flight ||
            launcher_of(stream_key) != expected_launcher)
            return s;
    }
    s.marked = true;
    unsynced_streams_.erase(stream_key);
    stream_launchers_.erase(stream_key);
    busy_streams_.erase(stream_key);
    s.quiet = unsynced_streams_.empty() && launched_since_quiet_;
    s.pending = !pending_launches_.empty() || unrecorded_launches_ != 0;
    if (s.quiet) launched_since_quiet_ = false;
    return s;
}

LaunchLog::Synced LaunchLog::context_synchronized() {
    Synced s;
    std::lock_guard<std::mutex> lock(mu_);
    unsynced_streams_.clear();
    stream_launchers_.clear();
    busy_streams_.clear();
    s.marked = true;
    s.quiet = launched_since_quiet_;
    s.pending = !pending_launches_.empty() || unrecorded_launches_ != 0;
    launched_since_quiet_ = false;
    return s;
}

bool LaunchLog::may_cut(bool require_quiet, uint64_t* launches_before) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return false;
    if (require_quiet && !unsynced_streams_.empty()) return false;
    *launches_before = launches_total_;
    return true;
}

bool LaunchLog::take_window(bool require_quiet, uint64_t launches_before, FlushWindow* w, uint64_t* raced) {
    std::lock_guard<std::mutex> lock(mu_);
    if (require_quiet && launches_total_ != launches_before) return false;
    w->launches.swap(pending_launches_);
    launches_cut_ = launches_total_;
    w->launches_end = launches_total_;
    // The ring pressure's plan starts again from this cut, with no launch between.
    valve_.reset_at_cut(sum_of(w->claimed), sum_of(w->warp_claimed));
    w->unrecorded = unrecorded_launches_;
    unrecorded_launches_ = 0;
    w->selected = function_selected_;
    // A cut that is not quiet may catch launches still running: their later
    // blocks claim past the cut, outside this window, so their counts and
    // records here may be partial. Flagged, not hidden.
    *raced = 0;
    if (!require_quiet)
        for (gpuobs_launch& l : w->launches)
            if (unsynced_streams_.count(l.stream_id)) {
                l.flags |= GPUOBS_LAUNCH_RACED_FLUSH;
                ++*raced;
            }
    return true;
}

bool LaunchLog::take_window_upto(uint64_t launches, uint64_t stream_key, FlushWindow* w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_ || launches <= launches_cut_ || launches > launches_total_) return false;
    const size_t n = (size_t)(launches - launches_cut_);
    // A launch on another stream listed after the snapshot was queued may have run
    // before the snapshot's copy did: its claims could lie below the cut.
    for (size_t i = n; i < pending_launches_.size(); ++i)
        if (pending_launches_[i].stream_id != stream_key) return false;
    uint64_t blocks = 0, warps = 0;
    for (size_t i = 0; i < n; ++i) {
        const gpuobs_launch& l = pending_launches_[i];
        const uint64_t b = grid_blocks(l.grid);
        blocks += b;
        warps += later_warps(b, l.block);  // 0 in the plan of a mode without warp arrivals: subtracting is safe
    }
    w->launches.assign(pending_launches_.begin(), pending_launches_.begin() + n);
    pending_launches_.erase(pending_launches_.begin(), pending_launches_.begin() + n);
    launches_cut_ = launches;
    w->launches_end = launches;
    // The plan keeps the launches after the snapshot: only what the window took leaves it.
    valve_.advance_cut(blocks, warps, sum_of(w->claimed), sum_of(w->warp_claimed));
    w->unrecorded = 0;  // paused launches wait for a full cut
    w->selected = function_selected_;
    return true;
}

bool LaunchLog::snapshot_point(uint64_t stream_key, uint64_t* launches) {
    std::lock_guard<std::mutex> lock(mu_);
    *launches = launches_total_;
    return alone_in_flight(stream_key) && launches_total_ > launches_cut_;
}

bool LaunchLog::alone(uint64_t stream_key) {
    std::lock_guard<std::mutex> lock(mu_);
    return alone_in_flight(stream_key);
}

uint64_t LaunchLog::launches_total() {
    std::lock_guard<std::mutex> lock(mu_);
    return launches_total_;
}

void LaunchLog::listed_after(uint64_t launch_number, const std::vector<uint32_t>& slots,
                             std::unordered_set<uint32_t>* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot_last_listed_.empty()) return;
    for (uint32_t s : slots)
        if (slot_last_listed_[s & (GPUOBS_LAUNCH_TABLE_SIZE - 1)] > launch_number) out->insert(s);
}

void LaunchLog::pending_graph_slots(std::vector<uint32_t>* slots) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const gpuobs_launch& l : pending_launches_)
        if (l.flags & GPUOBS_LAUNCH_GRAPH_NODE) slots->push_back(gpuobs_launch_slot(l.grid_id));
    std::sort(slots->begin(), slots->end());
    slots->erase(std::unique(slots->begin(), slots->end()), slots->end());
}

// Grids launched by kernels (dynamic parallelism): the host never saw them,
// and the sanitizer hands them the callback data of the kernel that launched
// them (seen on the H200), so each record's function is found from its pc and
// corrected in place; one launch is listed per such grid id.
void LaunchLog::list_device_launches(std::vector<gpuobs_event>& events, std::vector<gpuobs_launch>* launches) {
    // Most flushes hold no device-launched grid: the host's launch ids and the lock
    // on code_ranges_ (which launching threads also take) are only needed once one shows.
    std::unordered_set<uint64_t> known;
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
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

void LaunchLog::relief_state(uint64_t stream_key, bool* can_sync, uint64_t* in_flight) {
    std::lock_guard<std::mutex> lock(mu_);
    // Only a stream that is the only one with launches in flight, all of them
    // this thread's, may be waited for: other streams' work is not this
    // thread's to wait for (their records are dropped, and counted, if the ring
    // fills), another thread's launch on this stream may be begun and not yet
    // enqueued (an idle stream would not mean it ran), and a stream given up on
    // stays so until the program synchronises it.
    *can_sync = alone_in_flight(stream_key) && !busy_streams_.count(stream_key);
    auto it = unsynced_streams_.find(stream_key);
    *in_flight = it != unsynced_streams_.end() ? it->second : 0;
}

void LaunchLog::give_up_on(uint64_t stream_key) {
    std::lock_guard<std::mutex> lock(mu_);
    busy_streams_.insert(stream_key);
}

std::vector<std::pair<CUfunction, uint32_t>> LaunchLog::functions() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<CUfunction, uint32_t>> out;
    for (const auto& [f, fs] : function_slots_) out.emplace_back(f, fs.slot);
    return out;
}

}  // namespace gpuobs
