// A context's host side: its function slots and the launches since the last
// flush, fed by the callbacks; its quiet points, pause and destruction. Set up in
// context_setup.cpp, flushed in context_flush.cpp.
#include "context_state.h"

#include <cxxabi.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "api_trace.h"
#include "cuda_driver.h"
#include "notice.h"
#include "sanitizer_api.h"

namespace gpuobs {

thread_local bool g_in_tool = false;

uint64_t clock_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

uint64_t next_launch_id() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

ContextState::ContextState(CUcontext ctx, CUdevice device, const Config& config, RecordingFile& file)
    : ctx_(ctx), device_(device), device_index_((uint32_t)device), config_(config), file_(file) {}

uint32_t ContextState::function_slot_for(CUfunction f, const char* name, CUmodule module) {
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
    if (!config_.dump_patched_code.empty()) dump_code(config_.dump_patched_code, module, mangled, slot);
    if (config_.mode != GPUOBS_MODE_OFF && !config_.launch_scope) {
        SanitizerResult r = sanitizer().set_callback_data(f, callback_data(slot));
        if (r != SANITIZER_SUCCESS)
            write_notice(file_, GPUOBS_NOTICE_FUNCTION_UNBOUND, device_index_,
                         "cannot bind callback data to " + mangled + ": " + sanitizer().describe(r) +
                             " (its events will be missing)");
    }
    return slot;
}

void ContextState::on_functions_loaded(CUmodule module, const CUfunction* functions, uint32_t count) {
    // The names are asked of the driver before launch_mu_ is taken: a thread
    // holding launch_mu_ must not wait on the driver, whose locks a launching
    // thread (which takes launch_mu_ in its callbacks) may hold.
    CudaDriver& d = driver();
    std::vector<const char*> names(count, nullptr);
    for (uint32_t i = 0; i < count; ++i)
        if (d.func_get_name == nullptr || d.func_get_name(&names[i], functions[i]) != CUDA_SUCCESS) names[i] = nullptr;
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!active_ || destroyed_) return;
    for (uint32_t i = 0; i < count; ++i) function_slot_for(functions[i], names[i], module);
}

void ContextState::on_module_unloading(CUmodule module) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    for (auto it = function_slots_.begin(); it != function_slots_.end();)
        it = it->second.module == module ? function_slots_.erase(it) : std::next(it);
}

bool ContextState::on_launch(const LaunchInfo& launch) {
    const Sanitizer_LaunchData& ld = *launch.data;
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!active_ || destroyed_) return false;
    // Paused launches still count toward quietness: a window turns only when
    // none is in flight.
    ++unsynced_streams_[launch.stream_key];
    note_launcher(launch.stream_key);
    launched_since_quiet_ = true;
    // A function first seen while paused gets its slot and callback data now,
    // ready for the next window.
    uint32_t slot = function_slot_for(ld.function, ld.functionName, ld.module);
    if (paused_) {
        if (!launch.graph_node) ++unrecorded_launches_;  // replays count once, at on_graph_launch
        return false;
    }
    if (config_.mode != GPUOBS_MODE_OFF && config_.launch_scope && !launch.graph_node)
        sanitizer().set_launch_callback_data(ld.hLaunch, ld.function, ld.hStream, callback_data(slot));
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
    l.flags = launch.graph_node ? GPUOBS_LAUNCH_GRAPH_NODE : 0;
    if (config_.api_trace) l.api_call_id = ApiTrace::current_call();
    pending_launches_.push_back(l);
    ++launches_total_;
    return plan_blocks(l.grid, l.block);
}

bool ContextState::on_graph_replay(const std::vector<LearnedNode>& nodes, uint64_t stream_key, uint32_t replay_id) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!active_ || destroyed_) return false;
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
        pending_launches_.push_back(l);
        ++launches_total_;
        check |= plan_blocks(l.grid, l.block);
    }
    return check;
}

void ContextState::on_graph_launch(uint64_t stream_key) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!paused_ || !active_ || destroyed_) return;  // recorded replays are seen node by node
    ++unsynced_streams_[stream_key];
    note_launcher(stream_key);
    launched_since_quiet_ = true;
    ++unrecorded_launches_;
}

bool ContextState::on_stream_synchronized(uint64_t stream_key) {
    return mark_synchronized(stream_key, "stream synchronised");
}

uintptr_t ContextState::thread_tag() {
    static thread_local char tag;  // its address names the calling thread
    return reinterpret_cast<uintptr_t>(&tag);
}

void ContextState::note_launcher(uint64_t stream_key) {
    const uintptr_t me = thread_tag();
    auto [it, fresh] = stream_launchers_.try_emplace(stream_key, me);
    if (!fresh && it->second != me) it->second = kSharedStream;
}

uintptr_t ContextState::launcher_of(uint64_t stream_key) const {
    auto it = stream_launchers_.find(stream_key);
    return it == stream_launchers_.end() ? 0 : it->second;
}

// expected_in_flight (the tool's own quiet point): the stream is marked only if
// it still has exactly that many launches in flight, all by expected_launcher.
bool ContextState::mark_synchronized(uint64_t stream_key, const char* reason, uint64_t expected_in_flight,
                                     uintptr_t expected_launcher) {
    bool quiet, pending;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        if (expected_in_flight != 0) {
            auto it = unsynced_streams_.find(stream_key);
            if (it == unsynced_streams_.end() || it->second != expected_in_flight ||
                launcher_of(stream_key) != expected_launcher)
                return false;
        }
        unsynced_streams_.erase(stream_key);
        stream_launchers_.erase(stream_key);
        busy_streams_.erase(stream_key);
        quiet = unsynced_streams_.empty() && launched_since_quiet_;
        pending = !pending_launches_.empty() || unrecorded_launches_ != 0;
        if (quiet) launched_since_quiet_ = false;
    }
    if (quiet && pending) flush(reason, true);
    return quiet;
}

bool ContextState::on_context_synchronized() {
    bool quiet, pending;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        unsynced_streams_.clear();
        stream_launchers_.clear();
        busy_streams_.clear();
        quiet = launched_since_quiet_;
        pending = !pending_launches_.empty() || unrecorded_launches_ != 0;
        launched_since_quiet_ = false;
    }
    if (pending) flush("context synchronised", true);
    return quiet;
}

void ContextState::set_paused(bool paused) {
    if (!paused && config_.mode != GPUOBS_MODE_OFF && !config_.launch_scope) {
        // Bound again after every re-patch: cheap, and not left to whether the
        // sanitizer keeps a function's data across an unpatch.
        std::vector<std::pair<CUfunction, uint32_t>> functions;
        {
            std::lock_guard<std::mutex> lock(launch_mu_);
            for (const auto& [f, fs] : function_slots_) functions.emplace_back(f, fs.slot);
        }
        for (const auto& [f, slot] : functions) sanitizer().set_callback_data(f, callback_data(slot));
    }
    paused_ = paused;
}

void ContextState::on_destroy() {
    last_clock_sample_ns_ = 0;  // the final flush takes a last clock sample
    stop_measuring();
    flush("context destroyed");
    report_program_waits();
    std::lock_guard<std::mutex> flush_lock(flush_mu_);
    std::lock_guard<std::mutex> lock(launch_mu_);
    destroyed_ = true;
}

}  // namespace gpuobs
