// The contexts the tool knows: the recording file, opened at the first one; each
// context set up on first sight, looked up by the callbacks, and forgotten when
// destroyed; and what is done to all of them at once (synchronise, flush).
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "context_guard.h"
#include "context_state.h"
#include "cuda_driver.h"
#include "gpuobs_schema.h"
#include "log.h"
#include "notice.h"
#include "tool_state.h"

namespace gpuobs {
namespace {

std::string read_cmdline() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_run_info(Tool& t) {
    std::string argv = read_cmdline();
    gpuobs_run_info info;
    std::memset(&info, 0, sizeof info);
    info.pid = (uint32_t)getpid();
    info.mode = t.config.mode;
    info.sample_shift = t.config.sample_shift;
    info.callback_scope = t.config.launch_scope ? 1 : 0;
    info.capacity = t.config.capacity;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    info.start_realtime_ns = (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
    info.start_monotonic_ns = monotonic_ns();
    info.argv_len = (uint32_t)argv.size();
    info.window_every = t.config.window_every;
    t.file.write_chunk(GPUOBS_CHUNK_RUN, {{&info, sizeof info}, {argv.data(), argv.size()}});
}

// The recording is created at the first CUDA context, not at load: processes of
// the run that never use CUDA (shells, launchers) must not claim the file.
bool ensure_file_open() {
    Tool& t = *g_tool;
    std::lock_guard<std::mutex> lock(t.file_mu);
    if (!t.file_tried) {
        t.file_tried = true;
        std::string error;
        if (!t.file.open(t.config.output, &error)) {
            report("%s; running uninstrumented", error.c_str());
            t.active = false;
        } else {
            write_run_info(t);
        }
    }
    return t.file.is_open();
}

}  // namespace

// The state of a context, set up on first sight. Setting up calls the driver, so
// it runs outside contexts_mu: a thread inside a driver call must never wait on
// a lock held by a thread that is itself calling the driver. A setup that fails
// is tried once more at the context's next module load or launch (the first try
// can come too early, inside the context's creation); a second failure leaves
// the context uninstrumented, with a notice saying why.
ContextState* context_state(CUcontext ctx, CUdevice device, bool device_known) {
    Tool& t = *g_tool;
    if (!ensure_file_open()) return nullptr;
    constexpr int kMaxSetupAttempts = 2;
    {
        std::lock_guard<std::mutex> lock(t.contexts_mu);
        auto it = t.contexts.find(ctx);
        if (it != t.contexts.end()) return it->second->active() ? it->second : nullptr;
        if (t.in_setup.count(ctx) || t.setup_attempts[ctx] >= kMaxSetupAttempts) return nullptr;
        ++t.setup_attempts[ctx];
        t.in_setup.insert(ctx);  // other threads skip it meanwhile
    }
    auto done = [&](ContextState* state, const std::string& error) {
        std::lock_guard<std::mutex> lock(t.contexts_mu);
        t.in_setup.erase(ctx);
        if (state != nullptr) {
            t.contexts[ctx] = state;
            t.setup_attempts.erase(ctx);
            auto first = t.first_setup_error.find(ctx);
            if (first != t.first_setup_error.end()) {
                write_notice(t.file, GPUOBS_NOTICE_CONTEXT_SETUP_RETRIED, state->device_index(),
                             "a context's first setup failed (" + first->second + "); the second worked");
                t.first_setup_error.erase(first);
            }
            return state;
        }
        bool last = t.setup_attempts[ctx] >= kMaxSetupAttempts;
        if (!last)
            t.first_setup_error[ctx] = error;
        else
            t.first_setup_error.erase(ctx);
        if (last)
            write_notice(t.file, GPUOBS_NOTICE_CONTEXT_UNINSTRUMENTED,
                         device_known ? (uint32_t)device : GPUOBS_NO_DEVICE,
                         error + "; device " + std::to_string((int)device) +
                             " runs uninstrumented in this context (nothing of it is recorded)");
        else if (std::getenv("GPUOBS_DEBUG"))
            GPUOBS_LOG("%s; trying again at the context's next module load or launch", error.c_str());
        return (ContextState*)nullptr;
    };
    if (!device_known) {
        CudaDriver& d = driver();
        CUcontext popped;
        g_in_tool = true;
        bool ok = d.load() && d.ctx_push(ctx) == CUDA_SUCCESS;
        if (ok) {
            ok = d.ctx_get_device(&device) == CUDA_SUCCESS;
            d.ctx_pop(&popped);
        }
        g_in_tool = false;
        if (!ok) return done(nullptr, "cannot tell which device a context is on");
        device_known = true;
    }
    auto* state = new ContextState(ctx, device, t.config, t.file);
    if (t.paused) state->set_paused(true);
    std::string error;
    if (!state->setup(&error)) return done(nullptr, error);
    return done(state, "");
}

// A destroyed context: flushed, then forgotten with its modules, so that a
// context created later with the same handle (after cudaDeviceReset, say) is
// set up and patched like the first.
void forget_context(CUcontext ctx) {
    Tool& t = *g_tool;
    ContextState* state = nullptr;
    {
        std::lock_guard<std::mutex> lock(t.contexts_mu);
        auto it = t.contexts.find(ctx);
        if (it != t.contexts.end()) state = it->second;
        t.contexts.erase(ctx);
        t.setup_attempts.erase(ctx);
        t.first_setup_error.erase(ctx);
    }
    if (state == nullptr) return;
    std::lock_guard<std::mutex> lock(t.modules_mu);
    for (auto it = t.modules.begin(); it != t.modules.end();)
        it = it->second->context == state ? t.modules.erase(it) : std::next(it);
}

ContextState* known_context(CUcontext ctx) {
    std::lock_guard<std::mutex> lock(g_tool->contexts_mu);
    auto it = g_tool->contexts.find(ctx);
    return it == g_tool->contexts.end() ? nullptr : it->second;
}

std::vector<std::pair<CUcontext, ContextState*>> all_contexts() {
    std::lock_guard<std::mutex> lock(g_tool->contexts_mu);
    return {g_tool->contexts.begin(), g_tool->contexts.end()};
}

void synchronize_context(CUcontext ctx) {
    InTool guard;
    CurrentContext current(ctx);
    if (current.pushed) driver().ctx_synchronize();
}

void stop_all_measuring() {
    for (auto& [ctx, state] : all_contexts()) state->stop_measuring();
}

uint64_t flush_all(const char* reason, bool synchronize) {
    auto states = all_contexts();
    for (auto& [ctx, state] : states) {
        if (synchronize) synchronize_context(ctx);
        state->flush(reason);
        state->report_program_waits();
    }
    if (g_tool->config.api_trace) g_tool->api.write_pending(g_tool->file);
    return states.size();
}

}  // namespace gpuobs
