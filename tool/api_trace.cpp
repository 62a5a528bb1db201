#include "api_trace.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "log.h"

namespace gpuobs {
namespace {

// Calls open on this thread. Fixed size: the callback must not allocate per
// call; deeper nesting than this is not traced (and never seen in practice).
struct Frame {
    uint64_t call_id;
    uint64_t enter_ns;
    uint32_t api_id;
};
constexpr int kMaxDepth = 32;
thread_local Frame t_stack[kMaxDepth];
thread_local int t_depth = 0;
thread_local uint32_t t_tid = 0;

std::atomic<uint64_t> g_next_call{1};

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

}  // namespace

uint64_t ApiTrace::current_call() { return t_depth > 0 && t_depth <= kMaxDepth ? t_stack[t_depth - 1].call_id : 0; }

void ApiTrace::on_callback(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid,
                           const Sanitizer_CallbackData* cd) {
    const uint32_t api_id = ((uint32_t)domain << 16) | ((uint32_t)cbid & 0xffff);
    if (cd->callbackSite == SANITIZER_API_ENTER) {
        if (t_depth < kMaxDepth)
            t_stack[t_depth] = {g_next_call.fetch_add(1, std::memory_order_relaxed), now_ns(), api_id};
        ++t_depth;
        return;
    }
    if (t_depth == 0) return;  // an exit whose entry came before tracing started
    --t_depth;
    if (t_depth >= kMaxDepth) return;
    const Frame& f = t_stack[t_depth];
    if (f.api_id != api_id) return;  // unbalanced: never pair the wrong calls
    if (t_tid == 0) t_tid = (uint32_t)syscall(SYS_gettid);
    gpuobs_api_call c;
    c.call_id = f.call_id;
    c.enter_ns = f.enter_ns;
    c.exit_ns = now_ns();
    c.thread_id = t_tid;
    c.api_id = api_id;
    c.depth = (uint32_t)t_depth;
    c.result = cd->functionReturnValue != nullptr ? *static_cast<const int32_t*>(cd->functionReturnValue) : 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.size() >= kMaxPending) {
        if (!overflow_reported_) {
            overflow_reported_ = true;
            GPUOBS_LOG(
                "%zu CUDA API calls wait for a recording file that is not open yet; later calls are "
                "not traced until it is",
                pending_.size());
        }
        return;
    }
    if (names_.find(api_id) == names_.end()) {
        names_.emplace(api_id, cd->functionName != nullptr ? cd->functionName : "");
        unwritten_names_.push_back(api_id);
    }
    pending_.push_back(c);
    pending_size_ = pending_.size();
}

void ApiTrace::write_pending(RecordingFile& file) {
    std::vector<gpuobs_api_call> calls;
    std::vector<std::pair<uint32_t, std::string>> names;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!file.is_open()) return;
        calls.swap(pending_);
        pending_size_ = 0;
        for (uint32_t id : unwritten_names_) names.emplace_back(id, names_[id]);
        unwritten_names_.clear();
    }
    for (const auto& [id, name] : names) {
        gpuobs_api_name n;
        std::memset(&n, 0, sizeof n);
        n.api_id = id;
        n.name_len = (uint32_t)name.size();
        file.write_chunk(GPUOBS_CHUNK_API_NAMES, {{&n, sizeof n}, {name.data(), name.size()}});
    }
    PackBuffers buffers;  // (this may run on any thread that calls the API)
    if (!calls.empty())
        file.write_table_chunk(GPUOBS_CHUNK_API_CALLS, {nullptr, 0},
                               {calls.data(), calls.size() * sizeof(gpuobs_api_call)}, sizeof(gpuobs_api_call),
                               &buffers);
}

}  // namespace gpuobs
