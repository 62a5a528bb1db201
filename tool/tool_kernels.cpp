// The tool's own kernels in a context: the clock probe, which relates device
// time to the host clocks, and the harvest of the launch counters.
#include <time.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "context_guard.h"
#include "clocks.h"
#include "tool_kernels.h"
#include "cuda_driver.h"
#include "log.h"
#include "sanitizer_api.h"

namespace gpuobs {

// The tool's own kernels, loaded once (at the first flush, outside any
// creation callback) from the probe fatbin; any failure leaves the clock
// without samples and the counter harvest to a plain copy.
bool ToolKernels::load() {
    // Once tried, no lock: a cut (on a synchronising thread of the program) must
    // not wait for a drain that holds the lock through a counter harvest.
    if (done_.load()) return probe_fn_ != nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    return load_locked();
}

bool ToolKernels::load_locked() {
    if (tried_) return probe_fn_ != nullptr;
    tried_ = true;
    struct Done {
        std::atomic<bool>& done;
        ~Done() { done = true; }
    } mark_done{done_};
    if (config_.probe.empty()) return false;
    CudaDriver& d = driver();
    std::ifstream in(config_.probe, std::ios::binary);
    std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (image.empty()) return false;
    CurrentContext current(ctx_);
    CUmodule m = nullptr;
    const char* failed = !current.pushed                                        ? "make the context current"
                         : d.module_load_data(&m, image.data()) != CUDA_SUCCESS ? "load the probe module"
                         : d.module_get_function(&probe_fn_, m, "gpuobs_clock_probe") != CUDA_SUCCESS
                             ? "find the probe kernel"
                         : d.stream_create(&probe_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ? "create a stream"
                         : sanitizer().alloc(ctx_, reinterpret_cast<void**>(&probe_out_), 8) != SANITIZER_SUCCESS
                             ? "allocate the probe's output"
                             : nullptr;
    if (failed != nullptr) {
        probe_fn_ = nullptr;
        GPUOBS_LOG("clock probe unavailable (cannot %s); device times will carry no host-clock relation", failed);
        return false;
    }
    if (d.module_get_function(&snapshot_fn_, m, "gpuobs_snapshot") != CUDA_SUCCESS) snapshot_fn_ = nullptr;
    if (d.module_get_function(&gather_fn_, m, "gpuobs_gather_counts") != CUDA_SUCCESS ||
        sanitizer().alloc(ctx_, reinterpret_cast<void**>(&totals_), GPUOBS_LAUNCH_TABLE_SIZE * sizeof(uint64_t)) !=
            SANITIZER_SUCCESS)
        gather_fn_ = nullptr;
    return true;
}

// The probe kernel run once, to completion, on the tool's stream (the caller has
// made the context current): it writes %globaltimer to probe_out_.
bool ToolKernels::run_probe() {
    CudaDriver& d = driver();
    void* args[] = {&probe_out_};
    return d.launch_kernel(probe_fn_, 1, 1, 1, 1, 1, 1, 0, probe_stream_, args, nullptr) == CUDA_SUCCESS &&
           d.stream_synchronize(probe_stream_) == CUDA_SUCCESS;
}

// Host clocks read around a one-thread kernel that reads %globaltimer; the
// tightest of a few tries is kept. Any failure just leaves no sample.
bool ToolKernels::sample_clock(uint32_t device_index, Sanitizer_StreamHandle copy_stream, gpuobs_clock_sample* out) {
    std::lock_guard<std::mutex> lock(mu_);
    InTool guard;
    if (!load_locked()) return false;
    gpuobs_clock_sample best;
    std::memset(&best, 0, sizeof best);
    uint64_t best_width = ~0ull;
    CurrentContext current(ctx_);
    if (!current.pushed) return false;
    for (int attempt = 0; attempt < 5; ++attempt) {
        gpuobs_clock_sample s;
        std::memset(&s, 0, sizeof s);
        s.device_index = device_index;
        s.method = 1;
        s.realtime_before = clock_ns(CLOCK_REALTIME);
        s.boottime_before = clock_ns(CLOCK_BOOTTIME);
        s.monotonic_before = clock_ns(CLOCK_MONOTONIC);
        const bool ok = run_probe();
        s.monotonic_after = clock_ns(CLOCK_MONOTONIC);
        s.boottime_after = clock_ns(CLOCK_BOOTTIME);
        s.realtime_after = clock_ns(CLOCK_REALTIME);
        if (!ok || sanitizer().memcpy_dtoh(&s.device_ns, probe_out_, 8, copy_stream) != SANITIZER_SUCCESS) break;
        uint64_t width = s.monotonic_after - s.monotonic_before;
        if (width < best_width) {
            best_width = width;
            best = s;
        }
    }
    if (best_width == ~0ull) return false;
    *out = best;
    return true;
}

uint64_t ToolKernels::device_time_now(Sanitizer_StreamHandle copy_stream) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!load_locked()) return 0;
    CurrentContext current(ctx_);
    uint64_t t = 0;
    if (!current.pushed || !run_probe() || sanitizer().memcpy_dtoh(&t, probe_out_, 8, copy_stream) != SANITIZER_SUCCESS)
        return 0;
    return t;
}

// One total per launch-counter slot since the context's start (the table is
// never reset: kernels may be adding to it now). On the device where the harvest
// kernel is loaded (512 KiB comes back), else the whole striped table is copied (8 MiB).
bool ToolKernels::harvest_counts(gpuobs_launch_counter* counters, Sanitizer_StreamHandle copy_stream,
                                 std::vector<uint64_t>* totals) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t slots = GPUOBS_LAUNCH_TABLE_SIZE, stripes = GPUOBS_LAUNCH_COUNTER_STRIPES + 1;
    totals->assign(slots, 0);
    load_locked();
    CurrentContext current(ctx_);
    // At process exit the driver may be torn down before the last drain: the
    // context cannot be made current, and the plain copy below is all there is.
    if (gather_fn_ != nullptr && current.pushed) {
        CudaDriver& d = driver();
        uint64_t* table = reinterpret_cast<uint64_t*>(counters);
        uint32_t n = slots, k = stripes;
        void* args[] = {&table, &totals_, &n, &k};
        CUresult launched = d.launch_kernel(gather_fn_, 128, 1, 1, 256, 1, 1, 0, probe_stream_, args, nullptr);
        CUresult synced = launched == CUDA_SUCCESS ? d.stream_synchronize(probe_stream_) : CUDA_ERROR_NOT_READY;
        SanitizerResult copied = synced == CUDA_SUCCESS ? sanitizer().memcpy_dtoh(totals->data(), totals_,
                                                                                  slots * sizeof(uint64_t), copy_stream)
                                                        : SANITIZER_ERROR_NOT_READY;
        if (copied == SANITIZER_SUCCESS) return true;
        GPUOBS_LOG(
            "the counter harvest kernel failed (launch %d, sync %d, copy %d); copying the whole counter table "
            "from now on",
            (int)launched, (int)synced, (int)copied);
        gather_fn_ = nullptr;
    }
    std::vector<uint64_t> table((size_t)slots * stripes);
    if (sanitizer().memcpy_dtoh(table.data(), counters, table.size() * sizeof(uint64_t), copy_stream) !=
        SANITIZER_SUCCESS)
        return false;
    for (uint32_t s = 0; s < slots; ++s)
        for (uint32_t k = 0; k < stripes; ++k) (*totals)[s] += table[gpuobs_launch_counter_index(s, k)];
    return true;
}

bool ToolKernels::harvest_slots(gpuobs_launch_counter* counters, Sanitizer_StreamHandle copy_stream,
                                const std::vector<uint32_t>& slots, std::vector<std::pair<uint32_t, uint64_t>>* out) {
    std::lock_guard<std::mutex> lock(mu_);
    out->clear();
    load_locked();
    CurrentContext current(ctx_);
    if (gather_fn_ == nullptr || !current.pushed) return false;
    CudaDriver& d = driver();
    uint64_t* table = reinterpret_cast<uint64_t*>(counters);
    uint32_t n = GPUOBS_LAUNCH_TABLE_SIZE, k = GPUOBS_LAUNCH_COUNTER_STRIPES + 1;
    void* args[] = {&table, &totals_, &n, &k};
    if (d.launch_kernel(gather_fn_, 128, 1, 1, 256, 1, 1, 0, probe_stream_, args, nullptr) != CUDA_SUCCESS ||
        d.stream_synchronize(probe_stream_) != CUDA_SUCCESS)
        return false;
    // The slots of one graph are consecutive grid ids: a copy per run of slots no
    // more than kGap apart, not one per slot.
    constexpr uint32_t kGap = 64;
    std::vector<uint64_t> run;
    for (size_t i = 0; i < slots.size();) {
        size_t j = i;
        while (j + 1 < slots.size() && slots[j + 1] - slots[j] <= kGap) ++j;
        const uint32_t lo = slots[i], hi = slots[j];
        run.assign(hi - lo + 1, 0);
        if (sanitizer().memcpy_dtoh(run.data(), totals_ + lo, run.size() * sizeof(uint64_t), copy_stream) !=
            SANITIZER_SUCCESS)
            return false;
        for (size_t m = i; m <= j; ++m) out->emplace_back(slots[m], run[slots[m] - lo]);
        i = j + 1;
    }
    return true;
}

bool ToolKernels::queue_snapshot(CUstream stream, const DeviceArena& arena, uint32_t slot, uint64_t seq) {
    if (!done_.load() || snapshot_fn_ == nullptr) return false;
    const uint64_t* table = reinterpret_cast<const uint64_t*>(arena.counters);
    const uint64_t* control = reinterpret_cast<const uint64_t*>(arena.ctl);
    uint64_t* totals = arena.snapshot_totals(slot);
    uint64_t* control_copy = reinterpret_cast<uint64_t*>(arena.snapshot_control(slot));
    uint32_t slots = GPUOBS_LAUNCH_TABLE_SIZE, stripes = GPUOBS_LAUNCH_COUNTER_STRIPES + 1,
             words = sizeof(gpuobs_control) / sizeof(uint64_t);
    uint32_t* blocks_done = arena.snapshot_blocks_done(slot);
    uint64_t* published = arena.snapshot_published(slot);
    unsigned long long s = seq;
    void* args[] = {&table, &control, &totals, &control_copy, &slots, &stripes, &words, &blocks_done, &published, &s};
    return driver().launch_kernel(snapshot_fn_, 128, 1, 1, 256, 1, 1, 0, stream, args, nullptr) == CUDA_SUCCESS;
}

}  // namespace gpuobs
