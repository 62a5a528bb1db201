// gpuobs host tool: injected into a CUDA process (LD_PRELOAD, or gpuobs.attach()),
// it patches every module as the driver loads it, keeps one event buffer per
// context, and flushes it into the .gpuobs file at synchronisation points.
//
// It fails open: any problem leaves the program running, uninstrumented if need
// be, with one line on stderr saying why. No exception leaves a callback.
#include <sanitizer.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "api_trace.h"
#include "config.h"
#include "context_state.h"
#include "graph_table.h"
#include "cuda_driver.h"
#include "gpuobs_schema.h"
#include "log.h"
#include "notice.h"
#include "recording_file.h"
#include "sanitizer_api.h"

namespace gpuobs {
namespace {

struct PatchStep {
    Sanitizer_InstructionId instruction;
    const char* function;
};

std::vector<PatchStep> patch_plan(uint32_t mode) {
    switch (mode) {
        case GPUOBS_MODE_BLOCK_NOOP: return {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_block_noop"}};
        case GPUOBS_MODE_BLOCK_COUNTER: return {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_block_counter"}};
        case GPUOBS_MODE_BLOCK_TRACE:
            return {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_block_trace_enter"},
                    {SANITIZER_INSTRUCTION_BLOCK_EXIT, "gpuobs_block_trace_exit"}};
        case GPUOBS_MODE_BLOCK_TRACE_NOOP:
            return {{SANITIZER_INSTRUCTION_BLOCK_ENTER, "gpuobs_block_noop"},
                    {SANITIZER_INSTRUCTION_BLOCK_EXIT, "gpuobs_block_exit_noop"}};
        case GPUOBS_MODE_MEM_NOOP: return {{SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "gpuobs_mem_noop"}};
        case GPUOBS_MODE_MEM_SAMPLED:
        case GPUOBS_MODE_MEM_FULL: return {{SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, "gpuobs_mem_access"}};
        default: return {};
    }
}

constexpr uint32_t kNew = GPUOBS_MODULE_NEW, kPatching = GPUOBS_MODULE_PATCHING, kPatched = GPUOBS_MODULE_PATCHED,
                   kFailed = GPUOBS_MODULE_PATCH_FAILED, kNotPatched = GPUOBS_MODULE_NOT_PATCHED,
                   kDeferred = GPUOBS_MODULE_DEFERRED;

// A loaded module: its status and whether its instrumentation is in place now
// (windows patch and unpatch it; guarded by Tool::patch_mu).
struct ModuleRecord {
    std::atomic<uint32_t> status{kNew};
    ContextState* context = nullptr;
    bool instrumented = false;
};

// Lock order (a thread holding one may take those to its right, never to its left):
//   Tool::window_mu -> Tool::patch_mu -> ContextState::flush_mu_ -> ContextState::launch_mu_
//   -> GraphTable::mu_ / Tool::callbacks_mu / Tool::contexts_mu / Tool::modules_mu -> RecordingFile::mu_
// callbacks_mu is held while GraphTable::mu_ is asked whether node callbacks are needed;
// contexts_mu, modules_mu, file_mu and GraphTable::mu_ take nothing else while held but
// RecordingFile::mu_ (a notice or the run's first chunks are written under them). A launch callback
// never waits for a flush (a flush calls the driver, and a launching thread may hold driver locks).
struct Tool {
    Config config;
    RecordingFile file;
    Sanitizer_SubscriberHandle subscriber = nullptr;
    bool active = false;
    ApiTrace api;

    std::mutex contexts_mu;
    // Live contexts. A destroyed context leaves the map (its handle may come back
    // for the next context, after a device reset) but its state is never freed:
    // callbacks outlive teardown.
    std::unordered_map<CUcontext, ContextState*> contexts;
    std::unordered_map<CUcontext, int> setup_attempts;  // contexts not (yet) set up
    std::unordered_map<CUcontext, std::string> first_setup_error;
    std::unordered_set<CUcontext> in_setup;

    std::mutex patch_mu;  // the sanitizer's patching calls must be serialised
    std::mutex modules_mu;
    std::unordered_map<CUmodule, ModuleRecord*> modules;  // never freed, like contexts
    std::atomic<bool> paused{false};                      // gpuobs.pause(): contexts created now start paused
    std::mutex window_mu;                                 // one pause or resume at a time
    std::mutex callbacks_mu;
    bool node_callbacks_on = false;  // SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN enabled
    // Instantiated CUDA graphs and what is known of their kernel nodes. A graph
    // keeps the code its kernels had when it was instantiated, and patching or
    // unpatching a module under a live graph made later replays crash (illegal
    // instruction, seen on the H200), so windows do not turn while any exists.
    GraphTable graphs;
    bool graphs_reported = false;
    std::atomic<uint32_t> replay_ids{0};

    std::atomic<uint64_t> launch_callbacks{0}, node_callbacks{0}, graph_launches{0}, sync_callbacks{0};
    std::mutex file_mu;
    bool file_tried = false;
};

Tool* g_tool = nullptr;  // never destroyed

// Fail-open messages are printed once per process tree: child processes
// inherit GPUOBS_REPORTED and stay quiet about the same problem.
template <typename... Args>
void report(const char* fmt, Args... args) {
    if (std::getenv("GPUOBS_REPORTED") != nullptr) return;
    std::fprintf(stderr, "gpuobs: ");
    std::fprintf(stderr, fmt, args...);
    std::fprintf(stderr, "\n");
    setenv("GPUOBS_REPORTED", "1", 1);
}

void write_run_info(Tool& t);

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

size_t live_graphs() { return g_tool->graphs.live(); }

// The graph replay the calling thread is launching: its node callbacks (when
// on) arrive on this thread between the replay's LAUNCH_BEGIN and LAUNCH_END.
struct ReplayInFlight {
    CUgraphExec exec = nullptr;
    uint32_t id = 0;
    GraphTable::Source source = GraphTable::Source::kNodeCallbacks;
    bool begun = false;  // GraphTable::begin_replay was called: end_replay must be too
};
thread_local ReplayInFlight t_replay;

ModuleRecord* module_record(CUmodule m) {
    std::lock_guard<std::mutex> lock(g_tool->modules_mu);
    auto& slot = g_tool->modules[m];
    if (slot == nullptr) slot = new ModuleRecord();
    return slot;
}

// Marks the mode's patch points in a module and instruments it; holds patch_mu.
// Every time: unpatching a module drops its marks (patching again without them
// left the code unpatched, seen on the H200).
bool instrument_module(CUmodule module) {
    for (const PatchStep& step : patch_plan(g_tool->config.mode)) {
        SanitizerResult r = sanitizer().patch_instructions(step.instruction, module, step.function);
        if (r != SANITIZER_SUCCESS) {
            GPUOBS_LOG("cannot patch a module with %s: %s; that module runs unpatched", step.function,
                       sanitizer().describe(r));
            return false;
        }
    }
    SanitizerResult r = sanitizer().patch_module(module);
    if (r != SANITIZER_SUCCESS) {
        GPUOBS_LOG("cannot commit the patch of a module: %s; that module runs unpatched", sanitizer().describe(r));
        return false;
    }
    return true;
}

void notice_unpatched(uint32_t device) {
    write_notice(g_tool->file, GPUOBS_NOTICE_MODULE_UNPATCHED, device,
                 "a module could not be patched (see the line above): its kernels run unrecorded");
}

// Patches a module exactly once, even when several threads load modules at
// once: the compare-and-swap on its status elects one patcher. A module loaded
// while its context is paused waits for the next window.
void patch_module(ContextState* state, const Sanitizer_ResourceModuleData& md) {
    Tool& t = *g_tool;
    ModuleRecord* m = module_record(md.module);
    uint32_t expected = kNew;
    if (!m->status.compare_exchange_strong(expected, kPatching)) return;
    m->context = state;
    gpuobs_module_info info;
    std::memset(&info, 0, sizeof info);
    info.module_id = (uint64_t)md.module;
    info.device_index = state->device_index();
    info.cubin_size = (uint32_t)md.cubinSize;
    info.load_monotonic_ns = monotonic_ns();
    uint32_t status = kNotPatched;
    if (!patch_plan(t.config.mode).empty()) {
        std::lock_guard<std::mutex> lock(t.patch_mu);
        if (state->paused()) {
            status = kDeferred;
        } else if (instrument_module(md.module)) {
            status = kPatched;
            m->instrumented = true;
            info.patch_count = 1;
        } else {
            status = kFailed;
            notice_unpatched(state->device_index());
        }
    }
    info.status = status;
    m->status.store(status);
    t.file.write_chunk(GPUOBS_CHUNK_MODULE, {{&info, sizeof info}});
}

// Instruments (on) or restores (off) every module of one context, or of all
// (`only` null), that the tool patches, and sets those contexts' paused flag to
// match, all under patch_mu: a module loaded meanwhile sees the final state. The
// caller makes sure no kernel of those modules runs. Returns the modules changed.
int set_instrumented(ContextState* only, bool on) {
    Tool& t = *g_tool;
    std::vector<std::pair<CUmodule, ModuleRecord*>> modules;
    {
        std::lock_guard<std::mutex> lock(t.modules_mu);
        modules.assign(t.modules.begin(), t.modules.end());
    }
    auto states = all_contexts();
    std::lock_guard<std::mutex> lock(t.patch_mu);
    for (auto& [ctx, state] : states)
        if (!on && (only == nullptr || state == only)) state->set_paused(true);  // before any code changes
    int changed = 0;
    for (auto& [module, m] : modules) {
        uint32_t status = m->status.load();
        if ((status != kPatched && status != kDeferred) || (only != nullptr && m->context != only) ||
            m->instrumented == on)
            continue;
        bool ok;
        if (on) {
            ok = instrument_module(module);
        } else {
            SanitizerResult r = sanitizer().unpatch_module(module);
            ok = r == SANITIZER_SUCCESS;
            if (!ok) GPUOBS_LOG("cannot remove the patch of a module: %s; it stays patched", sanitizer().describe(r));
        }
        if (ok) {
            m->instrumented = on;
            if (on && status == kDeferred) m->status.store(kPatched);
            ++changed;
        }
    }
    for (auto& [ctx, state] : states)
        if (on && (only == nullptr || state == only)) state->set_paused(false);  // after all of it
    return changed;
}

// Per-node callbacks make every graph replay launch node by node from the host
// (the decode step: 1.4x with them on, nothing patched): they are on only while
// some context records and, in the default mode, only while some exec's kernel
// nodes are still to be learned (see graph_table.h). Outside windows a replay is
// seen once, at its launch.
void update_node_callbacks() {
    Tool& t = *g_tool;
    using GraphNodes = Config::GraphNodes;
    if (t.config.graph_nodes == GraphNodes::kNone) return;
    auto states = all_contexts();
    bool any_recording = states.empty() && !t.paused;
    for (auto& [ctx, state] : states) any_recording |= !state->paused();
    std::lock_guard<std::mutex> lock(t.callbacks_mu);
    const bool want = any_recording && (t.config.graph_nodes == GraphNodes::kEvery || t.graphs.needs_node_callbacks());
    if (want == t.node_callbacks_on) return;
    SanitizerResult r = sanitizer().enable_callback(want ? 1 : 0, t.subscriber, SANITIZER_CB_DOMAIN_GRAPHS,
                                                    SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN);
    if (r == SANITIZER_SUCCESS) t.node_callbacks_on = want;
}

bool node_callbacks_on() {
    std::lock_guard<std::mutex> lock(g_tool->callbacks_mu);
    return g_tool->node_callbacks_on;
}

// Automatic windows: at a quiet point of a context, the interval that starts
// now is recorded or not; the context's modules follow.
void turn_window(ContextState* s) {
    const bool record = s->next_interval_recorded(g_tool->config.window_every);
    if (record == !s->paused()) return;
    if (size_t graphs = live_graphs()) {
        if (!g_tool->graphs_reported)
            GPUOBS_LOG(
                "%zu CUDA graph(s) instantiated: recording windows stop turning while any exists (a graph "
                "keeps the code of the moment it was instantiated); recording stays %s",
                graphs, s->paused() ? "paused" : "on");
        g_tool->graphs_reported = true;
        return;
    }
    set_instrumented(s, record);
    update_node_callbacks();
}

void on_resource(Sanitizer_CallbackId cbid, const void* cbdata) {
    switch (cbid) {
        case SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED: {
            auto* cd = static_cast<const Sanitizer_ResourceContextData*>(cbdata);
            context_state(cd->context, cd->device, true);
            break;
        }
        case SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING: {
            auto* cd = static_cast<const Sanitizer_ResourceContextData*>(cbdata);
            if (ContextState* s = known_context(cd->context)) s->on_destroy();
            forget_context(cd->context);
            break;
        }
        case SANITIZER_CBID_RESOURCE_MODULE_LOADED: {
            auto* md = static_cast<const Sanitizer_ResourceModuleData*>(cbdata);
            if (ContextState* s = context_state(md->context, 0, false)) patch_module(s, *md);
            break;
        }
        case SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
            // The handle may name another module later: forget this one.
            auto* md = static_cast<const Sanitizer_ResourceModuleData*>(cbdata);
            if (ContextState* s = known_context(md->context)) s->on_module_unloading(md->module);
            std::lock_guard<std::mutex> lock(g_tool->modules_mu);
            g_tool->modules.erase(md->module);
            break;
        }
        case SANITIZER_CBID_RESOURCE_FUNCTIONS_LAZY_LOADED: {
            auto* fd = static_cast<const Sanitizer_ResourceFunctionsLazyLoadedData*>(cbdata);
            if (ContextState* s = context_state(fd->context, 0, false))
                s->on_functions_loaded(fd->module, fd->functions, fd->numFunctions);
            break;
        }
        default: break;
    }
}

void on_launch(Sanitizer_CallbackId cbid, const void* cbdata) {
    if (cbid != SANITIZER_CBID_LAUNCH_BEGIN) return;
    auto* ld = static_cast<const Sanitizer_LaunchData*>(cbdata);
    g_tool->launch_callbacks.fetch_add(1, std::memory_order_relaxed);
    if (ContextState* s = context_state(ld->context, ld->device, true))
        s->on_launch({ld, (uint64_t)ld->hStream, 0, false});
}

void on_graph(Sanitizer_CallbackId cbid, const void* cbdata) {
    Tool& t = *g_tool;
    const bool learn = t.config.graph_nodes == Config::GraphNodes::kLearn;
    if (cbid == SANITIZER_CBID_GRAPHS_GRAPHEXEC_CREATED || cbid == SANITIZER_CBID_GRAPHS_GRAPHEXEC_DESTROYING) {
        auto* gd = static_cast<const Sanitizer_GraphExecData*>(cbdata);
        if (cbid == SANITIZER_CBID_GRAPHS_GRAPHEXEC_CREATED)
            t.graphs.on_created(gd->graphExec, gd->graph, gd->isDeviceLaunch);
        else
            t.graphs.on_destroying(gd->graphExec);
        if (learn) update_node_callbacks();
        return;
    }
    if (cbid == SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN) {
        auto* gd = static_cast<const Sanitizer_GraphLaunchData*>(cbdata);
        if (gd->isGraphUpload) return;
        t.graph_launches.fetch_add(1, std::memory_order_relaxed);
        ContextState* s = known_context(gd->context);
        t_replay = ReplayInFlight{gd->graphExec, t.replay_ids.fetch_add(1, std::memory_order_relaxed) + 1,
                                  GraphTable::Source::kNodeCallbacks};
        if (s == nullptr) return;
        if (s->paused()) {
            s->on_graph_launch((uint64_t)gd->hStream);
            return;
        }
        if (!learn) return;
        std::vector<LearnedNode> nodes;
        t_replay.source = t.graphs.begin_replay(gd->graphExec, node_callbacks_on(), &nodes);
        t_replay.begun = true;
        if (t_replay.source == GraphTable::Source::kTable)
            s->on_graph_replay(nodes, (uint64_t)gd->hStream, t_replay.id);
        return;
    }
    if (cbid == SANITIZER_CBID_GRAPHS_LAUNCH_END) {
        auto* gd = static_cast<const Sanitizer_GraphLaunchData*>(cbdata);
        if (gd->isGraphUpload || !learn) return;
        if (t_replay.begun && t_replay.exec == gd->graphExec) t.graphs.end_replay(gd->graphExec, t_replay.source);
        t_replay = ReplayInFlight();
        update_node_callbacks();
        return;
    }
    if (cbid != SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN) return;
    auto* nd = static_cast<const Sanitizer_GraphNodeLaunchData*>(cbdata);
    if (nd->nodeType != CU_GRAPH_NODE_TYPE_KERNEL || nd->isGraphUpload) return;
    t.node_callbacks.fetch_add(1, std::memory_order_relaxed);
    const Sanitizer_LaunchData& ld = nd->launchData;
    const uint32_t replay = t_replay.exec == nd->graphExec ? t_replay.id : nd->launchId;
    if (ContextState* s = context_state(ld.context, ld.device, true)) {
        s->on_launch({&ld, (uint64_t)ld.hApiStream, replay, true});
        if (learn && !s->paused()) {
            LearnedNode node{nd->node,
                             0,
                             ld.gridId,
                             ld.function,
                             ld.module,
                             ld.functionName ? ld.functionName : "",
                             {ld.gridDim_x, ld.gridDim_y, ld.gridDim_z},
                             {ld.blockDim_x, ld.blockDim_y, ld.blockDim_z}};
            t.graphs.on_node(nd->graphExec, nd->launchId, node);
        }
    }
}

// Calls that change what an exec's replays launch: learned node tables may be stale.
bool changes_graph_exec(Sanitizer_CallbackId cbid) {
    switch (cbid) {
        case SANITIZER_CBID_DRIVER_API_cuGraphExecKernelNodeSetParams:
        case SANITIZER_CBID_DRIVER_API_cuGraphExecKernelNodeSetParams_v2:
        case SANITIZER_CBID_DRIVER_API_cuGraphExecNodeSetParams:
        case SANITIZER_CBID_DRIVER_API_cuGraphExecUpdate:
        case SANITIZER_CBID_DRIVER_API_cuGraphExecUpdate_v2:
        case SANITIZER_CBID_DRIVER_API_cuGraphExecChildGraphNodeSetParams:
        case SANITIZER_CBID_DRIVER_API_cuGraphNodeSetEnabled: return true;
        default: return false;
    }
}

constexpr Sanitizer_CallbackId kGraphExecChanges[] = {SANITIZER_CBID_DRIVER_API_cuGraphExecKernelNodeSetParams,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphExecKernelNodeSetParams_v2,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphExecNodeSetParams,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphExecUpdate,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphExecUpdate_v2,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphExecChildGraphNodeSetParams,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphNodeSetEnabled};

void on_driver_api(Sanitizer_CallbackId cbid, const Sanitizer_CallbackData* cd) {
    Tool& t = *g_tool;
    if (t.config.graph_nodes == Config::GraphNodes::kLearn && changes_graph_exec(cbid) &&
        cd->callbackSite == SANITIZER_API_EXIT) {
        t.graphs.invalidate_all();
        update_node_callbacks();
    }
}

void on_sync(Sanitizer_CallbackId cbid, const void* cbdata) {
    auto* sd = static_cast<const Sanitizer_SynchronizeData*>(cbdata);
    g_tool->sync_callbacks.fetch_add(1, std::memory_order_relaxed);
    ContextState* s = known_context(sd->context);
    if (s == nullptr) return;
    bool quiet = false;
    if (cbid == SANITIZER_CBID_SYNCHRONIZE_STREAM_SYNCHRONIZED)
        quiet = s->on_stream_synchronized((uint64_t)sd->hStream);
    else if (cbid == SANITIZER_CBID_SYNCHRONIZE_CONTEXT_SYNCHRONIZED)
        quiet = s->on_context_synchronized();
    if (quiet && g_tool->config.window_every != 0 && !g_tool->paused) turn_window(s);
    if (g_tool->config.api_trace) g_tool->api.write_pending(g_tool->file);
}

void SANITIZERAPI callback(void*, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* cbdata) {
    if (g_in_tool || g_tool == nullptr || !g_tool->active) return;
    try {
        switch (domain) {
            case SANITIZER_CB_DOMAIN_RESOURCE: on_resource(cbid, cbdata); break;
            case SANITIZER_CB_DOMAIN_LAUNCH: on_launch(cbid, cbdata); break;
            case SANITIZER_CB_DOMAIN_GRAPHS: on_graph(cbid, cbdata); break;
            case SANITIZER_CB_DOMAIN_SYNCHRONIZE: on_sync(cbid, cbdata); break;
            case SANITIZER_CB_DOMAIN_DRIVER_API:
            case SANITIZER_CB_DOMAIN_RUNTIME_API:
                if (domain == SANITIZER_CB_DOMAIN_DRIVER_API)
                    on_driver_api(cbid, static_cast<const Sanitizer_CallbackData*>(cbdata));
                if (!g_tool->config.api_trace) break;
                g_tool->api.on_callback(domain, cbid, static_cast<const Sanitizer_CallbackData*>(cbdata));
                if (g_tool->api.wants_write()) g_tool->api.write_pending(g_tool->file);
                break;
            default: break;
        }
    } catch (const std::exception& e) {
        GPUOBS_LOG("internal error (%s); recording continues", e.what());
    } catch (...) {
        GPUOBS_LOG("internal error; recording continues");
    }
}

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

bool start() {
    if (const char* off = std::getenv("GPUOBS_DISABLE"); off != nullptr && std::string(off) == "1") return false;
    Tool& t = *g_tool;
    std::string error;
    if (!t.config.load(&error)) {
        report("%s; running uninstrumented", error.c_str());
        return false;
    }
    if (!sanitizer().load(&error)) {
        report("%s; running uninstrumented", error.c_str());
        return false;
    }
    if (!driver().load()) {
        report("cannot load libcuda.so.1; running uninstrumented");
        return false;
    }
    SanitizerResult r = sanitizer().subscribe(&t.subscriber, callback, &t);
    if (r != SANITIZER_SUCCESS) {
        report(
            "the compute-sanitizer refused to start (%s); is %s compatible with this driver? running "
            "uninstrumented",
            sanitizer().describe(r), sanitizer().path.c_str());
        return false;
    }
    for (Sanitizer_CallbackDomain d :
         {SANITIZER_CB_DOMAIN_RESOURCE, SANITIZER_CB_DOMAIN_LAUNCH, SANITIZER_CB_DOMAIN_SYNCHRONIZE})
        sanitizer().enable_domain(1, t.subscriber, d);
    // Graph replays: listed from learned node tables (default) or node by node
    // (see update_node_callbacks); with none, a replay's blocks are still
    // recorded but belong to no listed launch. NODE_LAUNCH_END is never enabled.
    for (Sanitizer_CallbackId id :
         {SANITIZER_CBID_GRAPHS_GRAPHEXEC_CREATED, SANITIZER_CBID_GRAPHS_GRAPHEXEC_DESTROYING})
        sanitizer().enable_callback(1, t.subscriber, SANITIZER_CB_DOMAIN_GRAPHS, id);
    if (t.config.graph_nodes != Config::GraphNodes::kNone)
        for (Sanitizer_CallbackId id : {SANITIZER_CBID_GRAPHS_LAUNCH_BEGIN, SANITIZER_CBID_GRAPHS_LAUNCH_END})
            sanitizer().enable_callback(1, t.subscriber, SANITIZER_CB_DOMAIN_GRAPHS, id);
    if (t.config.graph_nodes == Config::GraphNodes::kLearn)
        for (Sanitizer_CallbackId id : kGraphExecChanges)
            sanitizer().enable_callback(1, t.subscriber, SANITIZER_CB_DOMAIN_DRIVER_API, id);
    if (t.config.api_trace)
        for (Sanitizer_CallbackDomain d : {SANITIZER_CB_DOMAIN_DRIVER_API, SANITIZER_CB_DOMAIN_RUNTIME_API})
            sanitizer().enable_domain(1, t.subscriber, d);
    t.paused = t.config.start_paused;
    t.active = true;
    update_node_callbacks();
    if (std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG("pid %d: recording %s to %s with %s", (int)getpid(), mode_name(t.config.mode),
                   t.config.output.c_str(), sanitizer().path.c_str());
    return true;
}

__attribute__((constructor)) void gpuobs_init() {
    g_tool = new Tool();
    try {
        start();
    } catch (...) {
        GPUOBS_LOG("internal error at start; running uninstrumented");
        g_tool->active = false;
    }
}

void synchronize_context(CUcontext ctx) {
    CudaDriver& d = driver();
    CUcontext popped;
    g_in_tool = true;
    if (d.ctx_push(ctx) == CUDA_SUCCESS) {
        d.ctx_synchronize();
        d.ctx_pop(&popped);
    }
    g_in_tool = false;
}

uint64_t flush_all(const char* reason, bool synchronize) {
    auto states = all_contexts();
    for (auto& [ctx, state] : states) {
        if (synchronize) synchronize_context(ctx);
        state->flush(reason);
    }
    if (g_tool->config.api_trace) g_tool->api.write_pending(g_tool->file);
    return states.size();
}

// gpuobs.pause() / gpuobs.resume(): every context is synchronised first, so no
// kernel runs while its code is patched or restored. Returns the modules changed.
int set_recording(bool on) {
    Tool& t = *g_tool;
    std::lock_guard<std::mutex> lock(t.window_mu);
    if (t.paused == !on) return 0;
    if (live_graphs() != 0) return -2;
    for (auto& [ctx, state] : all_contexts()) {
        synchronize_context(ctx);
        if (!on) state->flush("pause");
    }
    t.paused = !on;
    int changed = set_instrumented(nullptr, on);
    update_node_callbacks();
    if (t.config.api_trace) t.api.write_pending(t.file);
    return changed;
}

__attribute__((destructor)) void gpuobs_fini() {
    if (g_tool == nullptr || !g_tool->active || !g_tool->file.is_open()) return;
    Tool& t = *g_tool;
    try {
        if (std::getenv("GPUOBS_DEBUG"))
            GPUOBS_LOG("callbacks: launch %llu, graph node %llu, graph launch %llu, sync %llu",
                       (unsigned long long)t.launch_callbacks.load(), (unsigned long long)t.node_callbacks.load(),
                       (unsigned long long)t.graph_launches.load(), (unsigned long long)t.sync_callbacks.load());
        // Contexts the program never destroyed still hold events: flush them
        // (destroyed ones were flushed at CONTEXT_DESTROY_STARTING).
        flush_all("process exit", false);
        t.active = false;  // no callback may touch the file after this
        gpuobs_end_info end;
        std::memset(&end, 0, sizeof end);
        end.end_monotonic_ns = monotonic_ns();
        end.launches = t.launch_callbacks.load() + t.node_callbacks.load();
        t.file.write_chunk(GPUOBS_CHUNK_END, {{&end, sizeof end}});
        t.file.close();
    } catch (...) {}
}

}  // namespace
}  // namespace gpuobs

// ---- the in-process control surface, bound from Python through cffi ----------

extern "C" __attribute__((visibility("default"))) int gpuobs_tool_active(void) {
    return gpuobs::g_tool != nullptr && gpuobs::g_tool->active ? 1 : 0;
}

// Synchronises every instrumented context and flushes it; returns how many.
extern "C" __attribute__((visibility("default"))) int gpuobs_tool_flush(void) {
    if (!gpuobs_tool_active()) return -1;
    try {
        return (int)gpuobs::flush_all("explicit flush", true);
    } catch (...) {
        return -1;
    }
}

extern "C" __attribute__((visibility("default"))) const char* gpuobs_tool_output(void) {
    return gpuobs_tool_active() ? gpuobs::g_tool->file.path().c_str() : "";
}

extern "C" __attribute__((visibility("default"))) unsigned long long gpuobs_tool_launches(void) {
    if (gpuobs::g_tool == nullptr) return 0;
    return gpuobs::g_tool->launch_callbacks.load() + gpuobs::g_tool->node_callbacks.load();
}

// Recording windows: pause unpatches every module (the program runs at native
// speed, its launches only counted), resume patches them again. Both return the
// modules changed, -1 when the tool is not recording, -2 (nothing changed) while
// a CUDA graph is instantiated.
static int turn_recording(bool on) {
    if (!gpuobs_tool_active()) return -1;
    try {
        return gpuobs::set_recording(on);
    } catch (...) {
        return -1;
    }
}

extern "C" __attribute__((visibility("default"))) int gpuobs_tool_pause(void) { return turn_recording(false); }

extern "C" __attribute__((visibility("default"))) int gpuobs_tool_resume(void) { return turn_recording(true); }

extern "C" __attribute__((visibility("default"))) int gpuobs_tool_live_graphs(void) {
    return gpuobs_tool_active() ? (int)gpuobs::live_graphs() : 0;
}

extern "C" __attribute__((visibility("default"))) int gpuobs_tool_paused(void) {
    return gpuobs_tool_active() && gpuobs::g_tool->paused ? 1 : 0;
}
