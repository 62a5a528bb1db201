#include "context_state.h"

#include <cxxabi.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "api_trace.h"
#include "cuda_driver.h"
#include "log.h"
#include "notice.h"
#include "sanitizer_api.h"

namespace gpuobs {

thread_local bool g_in_tool = false;

namespace {

struct InTool {
    bool saved;
    InTool() : saved(g_in_tool) { g_in_tool = true; }
    ~InTool() { g_in_tool = saved; }
};

uint64_t clock_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

std::string demangle(const char* name) {
    if (name == nullptr) return "";
    int status = 0;
    char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (status != 0 || out == nullptr) return "";
    std::string s(out);
    std::free(out);
    return s;
}

template <typename T>
bool device_alloc(CUcontext ctx, T** out, size_t bytes, const char* what, std::string* error) {
    void* p = nullptr;
    SanitizerResult r = sanitizer().alloc(ctx, &p, bytes);
    if (r != SANITIZER_SUCCESS) {
        *error = std::string("cannot allocate ") + std::to_string(bytes) + " bytes of device memory for " + what +
                 ": " + sanitizer().describe(r);
        return false;
    }
    *out = static_cast<T*>(p);
    return true;
}

}  // namespace

uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

uint64_t next_launch_id() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

ContextState::ContextState(CUcontext ctx, CUdevice device, const Config& config, RecordingFile& file)
    : ctx_(ctx), device_(device), device_index_((uint32_t)device), config_(config), file_(file) {}

// Makes a context current on this thread for a scope. Callbacks run on the
// program's threads, whose current context may be another one or none (a
// driver-API program's context is created before it is made current).
struct CurrentContext {
    bool pushed = false;
    explicit CurrentContext(CUcontext ctx) { pushed = driver().ctx_push(ctx) == CUDA_SUCCESS; }
    ~CurrentContext() {
        CUcontext popped;
        if (pushed) driver().ctx_pop(&popped);
    }
};

bool ContextState::setup(std::string* error) {
    InTool guard;
    CudaDriver& d = driver();
    int sms = 0;
    if (!d.load() || d.device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_) != CUDA_SUCCESS ||
        sms <= 0) {
        *error = "cannot query the device's SM count through libcuda";
        return false;
    }
    sm_count_ = (uint32_t)sms;
    stripe_count_ = std::min<uint32_t>(sm_count_, GPUOBS_MAX_STRIPES);
    stripe_capacity_ = std::max<uint64_t>(1, config_.capacity / stripe_count_);
    if (config_.mode == GPUOBS_MODE_OFF) {
        write_device_info();
        active_ = true;
        return true;
    }
    CurrentContext current(ctx_);
    if (!current.pushed) {
        *error = "cannot make the context current to set it up";
        return false;
    }
    // Every step says which one failed and why: a context that cannot be set up
    // runs uninstrumented, and the user is told exactly what went wrong.
    auto step = [&](const std::string& what, SanitizerResult r) {
        if (r == SANITIZER_SUCCESS) return true;
        *error = "cannot " + what + ": " + sanitizer().describe(r);
        return false;
    };
    if (sanitizer().get_stream_handle != nullptr &&
        !step("get the context's stream handle", sanitizer().get_stream_handle(ctx_, nullptr, &stream_)))
        return false;
    if (!step("load the device patches " + config_.patches,
              sanitizer().add_patches_from_file(config_.patches.c_str(), ctx_)))
        return false;
    const size_t events_bytes = stripe_count_ * stripe_capacity_ * sizeof(gpuobs_event);
    const size_t counters_bytes = GPUOBS_LAUNCH_TABLE_SIZE * sizeof(gpuobs_launch_counter);
    const size_t table_bytes = (size_t)GPUOBS_BLOCK_TABLE_SIZE * sizeof(gpuobs_block_slot);
    const size_t entries_bytes = (size_t)GPUOBS_FUNCTION_TABLE_SIZE * sizeof(gpuobs_function_entry);
    // One arena (layout in the schema), aligned so that a patch finds every
    // table from its callback data pointer without a load.
    char* raw = nullptr;
    if (!device_alloc(ctx_, &raw, GPUOBS_ARENA_EVENTS + events_bytes + GPUOBS_ARENA_ALIGN, "the event buffer", error))
        return false;
    char* base = reinterpret_cast<char*>(((uint64_t)raw + GPUOBS_ARENA_ALIGN - 1) & ~(GPUOBS_ARENA_ALIGN - 1));
    entries_ = reinterpret_cast<gpuobs_function_entry*>(base);
    counters_ = reinterpret_cast<gpuobs_launch_counter*>(base + GPUOBS_ARENA_COUNTERS);
    ctl_ = reinterpret_cast<gpuobs_control*>(base + GPUOBS_ARENA_CONTROL);
    block_table_ = reinterpret_cast<gpuobs_block_slot*>(base + GPUOBS_ARENA_BLOCK_TABLE);
    events_ = reinterpret_cast<gpuobs_event*>(base + GPUOBS_ARENA_EVENTS);

    gpuobs_control ctl;
    std::memset(&ctl, 0, sizeof ctl);
    ctl.magic = GPUOBS_CONTROL_MAGIC;
    ctl.mode = config_.mode;
    ctl.sample_shift = config_.sample_shift;
    ctl.stripe_count = stripe_count_;
    ctl.stripe_capacity = stripe_capacity_;
    ctl.events = (uint64_t)events_;
    ctl.launch_counters = (uint64_t)counters_;
    ctl.block_table = (uint64_t)block_table_;
    // Every function entry is written now, so a function first seen inside a
    // graph replay never reads an unwritten entry.
    std::vector<gpuobs_function_entry> entries(GPUOBS_FUNCTION_TABLE_SIZE);
    for (uint32_t i = 0; i < GPUOBS_FUNCTION_TABLE_SIZE; ++i) {
        gpuobs_function_entry& e = entries[i];
        std::memset(&e, 0, sizeof e);
        e.stripe_capacity = stripe_capacity_;
        e.stripe_count = stripe_count_;
        e.sample_shift = config_.sample_shift;
        e.function_slot = i;
        e.mode = config_.mode;
    }
    uint32_t check = 0;
    // block_trace events are stamped by atomics on zeroed ends and exit counts.
    // The blocking copy at the end returns once the writes before it are done.
    bool ok =
        step("initialise the device buffers (control block)",
             sanitizer().memcpy_htod_async(ctl_, &ctl, sizeof ctl, stream_)) &&
        step("initialise the device buffers (function table)",
             sanitizer().memcpy_htod_async(entries_, entries.data(), entries_bytes, stream_)) &&
        step("initialise the device buffers (launch counters)",
             sanitizer().memset(counters_, 0, counters_bytes, stream_)) &&
        step("initialise the device buffers (block table)",
             sanitizer().memset(block_table_, 0, table_bytes, stream_)) &&
        step("initialise the device buffers (events)", sanitizer().memset(events_, 0, events_bytes, stream_)) &&
        step("initialise the device buffers (read back)", sanitizer().memcpy_dtoh(&check, ctl_, sizeof check, stream_));
    if (!ok) return false;
    if (check != GPUOBS_CONTROL_MAGIC) {
        *error = "cannot initialise the device buffers: the control block read back wrong";
        return false;
    }
    function_selected_.assign(GPUOBS_FUNCTION_TABLE_SIZE, 1);
    write_device_info();
    active_ = true;
    return true;
}

void ContextState::write_device_info() {
    gpuobs_device_info info;
    std::memset(&info, 0, sizeof info);
    info.device_index = device_index_;
    info.sm_count = sm_count_;
    info.context_id = (uint64_t)ctx_;
    CudaDriver& d = driver();
    int major = 0, minor = 0;
    d.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    d.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    info.cc_major = (uint32_t)major;
    info.cc_minor = (uint32_t)minor;
    d.device_get_name(info.name, sizeof info.name - 1, device_);
    CUuuid uuid;
    if (d.device_get_uuid != nullptr && d.device_get_uuid(&uuid, device_) == CUDA_SUCCESS)
        std::memcpy(info.uuid, uuid.bytes, 16);
    file_.write_chunk(GPUOBS_CHUNK_DEVICE, {{&info, sizeof info}});
}

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

// A debugging aid for patch work: the function's machine code as it runs now
// (patched), to disassemble with `nvdisasm -b SM90 FILE`.
void ContextState::dump_code(const std::string& dir, CUmodule module, const std::string& name, uint32_t slot) {
    uint64_t pc = 0, size = 0;
    if (sanitizer().function_pc_and_size(module, name.c_str(), &pc, &size) != SANITIZER_SUCCESS || size == 0 ||
        size > (64u << 20))
        return;
    std::vector<char> code(size);
    if (sanitizer().memcpy_dtoh(code.data(), reinterpret_cast<void*>(pc), size, stream_) != SANITIZER_SUCCESS) return;
    std::ofstream out(dir + "/" + std::to_string(device_index_) + "-" + std::to_string(slot) + ".bin",
                      std::ios::binary);
    out.write(code.data(), (std::streamsize)code.size());
    std::ofstream names(dir + "/functions.txt", std::ios::app);
    names << device_index_ << "-" << slot << " " << name << "\n";
    // Where the sanitizer's trampolines are: the 64 KB around each absolute JMP
    // target (sm_90 JMP: opcode bytes 4a 79, the target from bit 24), read now,
    // for this function: modules loaded later add trampolines to the same pages.
    std::unordered_set<uint64_t> dumped;
    for (size_t at = 0; at + 16 <= code.size(); at += 16) {
        const auto* ins = reinterpret_cast<const uint8_t*>(code.data() + at);
        if (ins[0] != 0x4a || ins[1] != 0x79) continue;
        uint64_t target = 0;
        for (int k = 8; k >= 3; --k) target = (target << 8) | ins[k];
        uint64_t base = target & ~0xffffull;
        if (target < pc + size && target >= pc) continue;
        if (!dumped.insert(base).second) continue;
        std::vector<char> region(0x10000);
        if (sanitizer().memcpy_dtoh(region.data(), reinterpret_cast<void*>(base), region.size(), stream_) !=
            SANITIZER_SUCCESS)
            continue;
        char hex[32];
        std::snprintf(hex, sizeof hex, "%llx", (unsigned long long)base);
        std::ofstream r(
            dir + "/" + std::to_string(device_index_) + "-" + std::to_string(slot) + ".region-" + hex + ".bin",
            std::ios::binary);
        r.write(region.data(), (std::streamsize)region.size());
    }
}

void ContextState::on_functions_loaded(CUmodule module, const CUfunction* functions, uint32_t count) {
    CudaDriver& d = driver();
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!active_ || destroyed_) return;
    for (uint32_t i = 0; i < count; ++i) {
        const char* name = nullptr;
        if (d.func_get_name == nullptr || d.func_get_name(&name, functions[i]) != CUDA_SUCCESS) name = nullptr;
        function_slot_for(functions[i], name, module);
    }
}

void ContextState::on_module_unloading(CUmodule module) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    for (auto it = function_slots_.begin(); it != function_slots_.end();)
        it = it->second.module == module ? function_slots_.erase(it) : std::next(it);
}

void ContextState::on_launch(const LaunchInfo& launch) {
    const Sanitizer_LaunchData& ld = *launch.data;
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!active_ || destroyed_) return;
    // Paused launches still count toward quietness: a window turns only when
    // none is in flight.
    ++unsynced_streams_[launch.stream_key];
    launched_since_quiet_ = true;
    // A function first seen while paused gets its slot and callback data now,
    // ready for the next window.
    uint32_t slot = function_slot_for(ld.function, ld.functionName, ld.module);
    if (paused_) {
        if (!launch.graph_node) ++unrecorded_launches_;  // replays count once, at on_graph_launch
        return;
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
}

void ContextState::on_graph_replay(const std::vector<LearnedNode>& nodes, uint64_t stream_key, uint32_t replay_id) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!active_ || destroyed_) return;
    ++unsynced_streams_[stream_key];
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
    }
}

void ContextState::on_graph_launch(uint64_t stream_key) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    if (!paused_ || !active_ || destroyed_) return;  // recorded replays are seen node by node
    ++unsynced_streams_[stream_key];
    launched_since_quiet_ = true;
    ++unrecorded_launches_;
}

bool ContextState::on_stream_synchronized(uint64_t stream_key) {
    bool quiet, pending;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        unsynced_streams_.erase(stream_key);
        quiet = unsynced_streams_.empty() && launched_since_quiet_;
        pending = !pending_launches_.empty() || unrecorded_launches_ != 0;
        if (quiet) launched_since_quiet_ = false;
    }
    if (quiet && pending) flush("stream synchronised", true);
    return quiet;
}

bool ContextState::on_context_synchronized() {
    bool quiet, pending;
    {
        std::lock_guard<std::mutex> lock(launch_mu_);
        unsynced_streams_.clear();
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

// The tool's own kernels, loaded once (at the first flush, outside any
// creation callback) from the probe fatbin; any failure leaves the clock
// without samples and the counter harvest to a plain copy.
bool ContextState::load_tool_kernels() {
    if (tool_kernels_tried_) return probe_fn_ != nullptr;
    tool_kernels_tried_ = true;
    if (config_.probe.empty()) return false;
    CudaDriver& d = driver();
    std::ifstream in(config_.probe, std::ios::binary);
    std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (image.empty()) return false;
    CurrentContext current(ctx_);
    CUmodule m = nullptr;
    bool ok = current.pushed && d.module_load_data(&m, image.data()) == CUDA_SUCCESS &&
              d.module_get_function(&probe_fn_, m, "gpuobs_clock_probe") == CUDA_SUCCESS &&
              d.stream_create(&probe_stream_, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
    if (!ok || sanitizer().alloc(ctx_, reinterpret_cast<void**>(&probe_out_), 8) != SANITIZER_SUCCESS) {
        probe_fn_ = nullptr;
        GPUOBS_LOG("clock probe unavailable; device times will carry no host-clock relation");
        return false;
    }
    if (d.module_get_function(&gather_fn_, m, "gpuobs_gather_counts") != CUDA_SUCCESS ||
        sanitizer().alloc(ctx_, reinterpret_cast<void**>(&totals_), GPUOBS_LAUNCH_TABLE_SIZE * sizeof(uint64_t)) !=
            SANITIZER_SUCCESS)
        gather_fn_ = nullptr;
    return true;
}

// Host clocks read around a one-thread kernel that reads %globaltimer; the
// tightest of a few tries is kept. Any failure just leaves no sample.
void ContextState::sample_clock() {
    InTool guard;
    CudaDriver& d = driver();
    if (!load_tool_kernels()) return;
    gpuobs_clock_sample best;
    std::memset(&best, 0, sizeof best);
    uint64_t best_width = ~0ull;
    CurrentContext current(ctx_);
    if (!current.pushed) return;
    for (int attempt = 0; attempt < 5; ++attempt) {
        gpuobs_clock_sample s;
        std::memset(&s, 0, sizeof s);
        s.device_index = device_index_;
        s.method = 1;
        void* args[] = {&probe_out_};
        s.realtime_before = clock_ns(CLOCK_REALTIME);
        s.boottime_before = clock_ns(CLOCK_BOOTTIME);
        s.monotonic_before = clock_ns(CLOCK_MONOTONIC);
        bool ok = d.launch_kernel(probe_fn_, 1, 1, 1, 1, 1, 1, 0, probe_stream_, args, nullptr) == CUDA_SUCCESS &&
                  d.stream_synchronize(probe_stream_) == CUDA_SUCCESS;
        s.monotonic_after = clock_ns(CLOCK_MONOTONIC);
        s.boottime_after = clock_ns(CLOCK_BOOTTIME);
        s.realtime_after = clock_ns(CLOCK_REALTIME);
        if (!ok || sanitizer().memcpy_dtoh(&s.device_ns, probe_out_, 8, stream_) != SANITIZER_SUCCESS) break;
        uint64_t width = s.monotonic_after - s.monotonic_before;
        if (width < best_width) {
            best_width = width;
            best = s;
        }
    }
    if (best_width != ~0ull) file_.write_chunk(GPUOBS_CHUNK_CLOCK, {{&best, sizeof best}});
}

// One total per launch-counter slot, the table zeroed for the next window. On
// the device where the harvest kernel is loaded (512 KiB comes back), else the
// whole striped table is copied and cleared (8 MiB).
bool ContextState::harvest_counts() {
    const uint32_t slots = GPUOBS_LAUNCH_TABLE_SIZE, stripes = GPUOBS_LAUNCH_COUNTER_STRIPES + 1;
    counter_staging_.assign(slots, 0);
    load_tool_kernels();
    if (gather_fn_ != nullptr) {
        CudaDriver& d = driver();
        CurrentContext current(ctx_);
        uint64_t* table = reinterpret_cast<uint64_t*>(counters_);
        uint32_t n = slots, k = stripes;
        void* args[] = {&table, &totals_, &n, &k};
        CUresult launched = current.pushed
                                ? d.launch_kernel(gather_fn_, 128, 1, 1, 256, 1, 1, 0, probe_stream_, args, nullptr)
                                : CUDA_ERROR_INVALID_CONTEXT;
        CUresult synced = launched == CUDA_SUCCESS ? d.stream_synchronize(probe_stream_) : CUDA_ERROR_NOT_READY;
        SanitizerResult copied = synced == CUDA_SUCCESS ? sanitizer().memcpy_dtoh(counter_staging_.data(), totals_,
                                                                                  slots * sizeof(uint64_t), stream_)
                                                        : SANITIZER_ERROR_NOT_READY;
        if (copied == SANITIZER_SUCCESS) return true;
        GPUOBS_LOG(
            "the counter harvest kernel failed (launch %d, sync %d, copy %d); copying the whole counter table "
            "from now on",
            (int)launched, (int)synced, (int)copied);
        gather_fn_ = nullptr;
    }
    std::vector<uint64_t> table((size_t)slots * stripes);
    if (sanitizer().memcpy_dtoh(table.data(), counters_, table.size() * sizeof(uint64_t), stream_) != SANITIZER_SUCCESS)
        return false;
    for (uint32_t s = 0; s < slots; ++s)
        for (uint32_t k = 0; k < stripes; ++k) counter_staging_[s] += table[gpuobs_launch_counter_index(s, k)];
    sanitizer().memset(counters_, 0, table.size() * sizeof(uint64_t), stream_);
    return true;
}

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
        for (uint32_t s = 0; s < stripe_count_; ++s)
            if (used_per_stripe[s] != 0)
                sanitizer().memset(events_ + s * stripe_capacity_, 0, used_per_stripe[s] * sizeof(gpuobs_event),
                                   stream_);
    }
    uint32_t check;
    sanitizer().memcpy_dtoh(&check, ctl_, sizeof check, stream_);  // returns once the resets are done
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
    if (config_.mode != GPUOBS_MODE_OFF) {
        gpuobs_control ctl;
        if (sanitizer().memcpy_dtoh(&ctl, ctl_, sizeof ctl, stream_) != SANITIZER_SUCCESS) {
            GPUOBS_LOG("flush (%s): cannot read the control block; this window's events are lost", reason);
            return;
        }
        staging_.clear();
        std::vector<uint64_t> used(stripe_count_, 0);
        for (uint32_t s = 0; s < stripe_count_; ++s) {
            uint64_t claimed = ctl.stripes[s].claimed, n = std::min(claimed, stripe_capacity_);
            info.attempted += claimed;
            info.dropped += ctl.stripes[s].dropped;
            used[s] = n;
            if (n == 0) continue;
            size_t at = staging_.size();
            staging_.resize(at + n);
            sanitizer().memcpy_dtoh(&staging_[at], events_ + s * stripe_capacity_, n * sizeof(gpuobs_event), stream_);
        }
        info.recorded = staging_.size();
        if (info.recorded + info.dropped != info.attempted)
            GPUOBS_LOG("flush %u: accounting mismatch: recorded %llu + dropped %llu != attempted %llu", info.flush_seq,
                       (unsigned long long)info.recorded, (unsigned long long)info.dropped,
                       (unsigned long long)info.attempted);
        info.unmatched_exit_threads = ctl.unmatched_exit_threads;
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
            if (e.kind == GPUOBS_EVENT_EMPTY || (e.kind == GPUOBS_EVENT_BLOCK && e.time_end == 0)) {
                ++info.incomplete;
            } else if (e.function_slot < selected.size() && !selected[e.function_slot]) {
                ++info.filtered;
            } else {
                staging_[kept++] = e;
            }
        }
        staging_.resize(kept);
        list_device_launches(staging_, &launches);
        if (harvest_counts())
            write_launch_counts(launches, &counts, &info.unattributed);
        else
            GPUOBS_LOG("flush %u (%s): cannot read the launch counters; this window's counts are lost", info.flush_seq,
                       reason);
        reset_device_buffers(used);
    }
    if (!launches.empty())
        file_.write_chunk(GPUOBS_CHUNK_LAUNCHES, {{launches.data(), launches.size() * sizeof(gpuobs_launch)}});
    info.launch_count_len = (uint32_t)counts.size();
    file_.write_chunk(GPUOBS_CHUNK_FLUSH,
                      {{&info, sizeof info}, {counts.data(), counts.size() * sizeof(gpuobs_launch_count)}});
    if (!staging_.empty())
        file_.write_events(device_index_, info.flush_seq, staging_.data(), (uint32_t)staging_.size());
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

void ContextState::on_destroy() {
    last_clock_sample_ns_ = 0;  // the final flush takes a last clock sample
    flush("context destroyed");
    std::lock_guard<std::mutex> flush_lock(flush_mu_);
    std::lock_guard<std::mutex> lock(launch_mu_);
    destroyed_ = true;
}

}  // namespace gpuobs
