// gpuobs host tool: injected into a CUDA process (LD_PRELOAD, or gpuobs.attach()),
// it patches every module as the driver loads it, keeps one event buffer per
// context, and flushes it into the .gpuobs file at synchronisation points.
//
// It fails open: any problem leaves the program running, uninstrumented if need
// be, with one line on stderr saying why. No exception leaves a callback.
//
// This file: the sanitizer callbacks and their dispatch, start (the constructor)
// and exit (the destructor). The shared state and the lock order are in
// tool_state.h; the rest of the tool, by job: context_registry.cpp, patching.cpp,
// recording_windows.cpp and control_api.cpp, and per context the facade
// context_state.h over its parts (device_arena, launch_log, pressure_valve,
// drainer, tool_kernels).
#include <sanitizer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "config.h"
#include "context_guard.h"
#include "context_state.h"
#include "graph_table.h"
#include "gpuobs_schema.h"
#include "log.h"
#include "notice.h"
#include "sanitizer_api.h"
#include "tool_state.h"

namespace gpuobs {

Tool* g_tool = nullptr;  // never destroyed

namespace {

// The graph replay the calling thread is launching: its node callbacks (when
// on) arrive on this thread between the replay's LAUNCH_BEGIN and LAUNCH_END.
struct ReplayInFlight {
    CUgraphExec exec = nullptr;
    uint32_t id = 0;
    GraphTable::Source source = GraphTable::Source::kNodeCallbacks;
    bool begun = false;  // GraphTable::begin_replay was called: end_replay must be too
};
thread_local ReplayInFlight t_replay;

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

// The context whose rings are due a fill check once the calling thread's launch
// (or graph replay) is enqueued. LAUNCH_END notes the stream; the check runs when
// the launching API call returns (its outermost exit), where the driver holds no
// lock of the launch: a driver call made inside LAUNCH_END hung an 8-thread storm.
thread_local ContextState* t_fill_check = nullptr;
struct PendingFillCheck {
    ContextState* state = nullptr;
    CUstream stream = nullptr;
    uint64_t stream_key = 0;
};
thread_local PendingFillCheck t_pending_check;
thread_local int t_launch_api_depth = 0;
PendingFillCheck take_pending_check() {
    PendingFillCheck c = t_pending_check;
    t_pending_check = PendingFillCheck();
    return c;
}

void check_fill_after_launch(CUstream stream, uint64_t stream_key) {
    if (t_fill_check == nullptr) return;
    t_pending_check = {t_fill_check, stream, stream_key};
    t_fill_check = nullptr;
    if (t_launch_api_depth == 0)  // no launch API call seen around it: never wait here
        take_pending_check().state->ask_for_measurement();
}

constexpr Sanitizer_CallbackId kLaunchDriverApis[] = {SANITIZER_CBID_DRIVER_API_cuLaunchKernel,
                                                      SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz,
                                                      SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx,
                                                      SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz,
                                                      SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel,
                                                      SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel_ptsz,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphLaunch,
                                                      SANITIZER_CBID_DRIVER_API_cuGraphLaunch_ptsz};
constexpr Sanitizer_CallbackId kLaunchRuntimeApis[] = {SANITIZER_CBID_RUNTIME_API_cudaLaunchKernel,
                                                       SANITIZER_CBID_RUNTIME_API_cudaLaunchKernel_ptsz,
                                                       SANITIZER_CBID_RUNTIME_API_cudaLaunchKernelExC,
                                                       SANITIZER_CBID_RUNTIME_API_cudaLaunchKernelExC_ptsz,
                                                       SANITIZER_CBID_RUNTIME_API_cudaLaunchCooperativeKernel,
                                                       SANITIZER_CBID_RUNTIME_API_cudaLaunchCooperativeKernel_ptsz,
                                                       SANITIZER_CBID_RUNTIME_API_cudaGraphLaunch,
                                                       SANITIZER_CBID_RUNTIME_API_cudaGraphLaunch_ptsz};

bool is_launch_api(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid) {
    if (domain == SANITIZER_CB_DOMAIN_DRIVER_API)
        return std::find(std::begin(kLaunchDriverApis), std::end(kLaunchDriverApis), cbid) !=
               std::end(kLaunchDriverApis);
    if (domain == SANITIZER_CB_DOMAIN_RUNTIME_API)
        return std::find(std::begin(kLaunchRuntimeApis), std::end(kLaunchRuntimeApis), cbid) !=
               std::end(kLaunchRuntimeApis);
    return false;
}

// The outermost launch API call's exit runs the check its launch asked for.
void on_launch_api(Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const Sanitizer_CallbackData* cd) {
    if (!is_launch_api(domain, cbid)) return;
    if (cd->callbackSite == SANITIZER_API_ENTER) {
        ++t_launch_api_depth;
        return;
    }
    if (t_launch_api_depth > 0 && --t_launch_api_depth > 0) return;
    const PendingFillCheck c = take_pending_check();
    if (c.state != nullptr) c.state->relieve_ring_pressure(c.stream, c.stream_key);
}

void on_launch(Sanitizer_CallbackId cbid, const void* cbdata) {
    auto* ld = static_cast<const Sanitizer_LaunchData*>(cbdata);
    if (cbid == SANITIZER_CBID_LAUNCH_END) {
        check_fill_after_launch(ld->stream, (uint64_t)ld->hStream);
        return;
    }
    if (cbid != SANITIZER_CBID_LAUNCH_BEGIN) return;
    g_tool->launch_callbacks.fetch_add(1, std::memory_order_relaxed);
    ContextState* s = context_state(ld->context, ld->device, true);
    // Set or cleared at every launch: a launch that never reached its end must not
    // leave its request to the next one.
    t_fill_check = s != nullptr && s->on_launch({ld, (uint64_t)ld->hStream, 0, false}) ? s : nullptr;
}

// Kernels first seen inside conditional nodes' bodies, said once in the recording.
void report_conditional_bodies(CUcontext ctx) {
    std::vector<std::string> names = g_tool->graphs.take_new_body_kernels();
    if (names.empty()) return;
    ContextState* s = known_context(ctx);
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    write_notice(g_tool->file, GPUOBS_NOTICE_CONDITIONAL_BODIES, s != nullptr ? s->device_index() : 0,
                 "kernels inside conditional nodes' bodies (WHILE, IF, SWITCH) of graph replays: " + list +
                     ". The device decides how often a body runs and the driver reports its kernel nodes once per "
                     "replay, so each is listed once per replay (flag conditional_body) with the count and records "
                     "of all its runs in that replay (runs = counted / grid blocks)");
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
        t_fill_check = nullptr;  // this replay's own request, if any, comes below or from its nodes
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
        if (t_replay.source == GraphTable::Source::kTable &&
            s->on_graph_replay(nodes, (uint64_t)gd->hStream, t_replay.id))
            t_fill_check = s;
        return;
    }
    if (cbid == SANITIZER_CBID_GRAPHS_LAUNCH_END) {
        auto* gd = static_cast<const Sanitizer_GraphLaunchData*>(cbdata);
        if (gd->isGraphUpload) return;
        if (learn) {
            if (t_replay.begun && t_replay.exec == gd->graphExec) t.graphs.end_replay(gd->graphExec, t_replay.source);
            t_replay = ReplayInFlight();
            update_node_callbacks();
        }
        report_conditional_bodies(gd->context);
        check_fill_after_launch(gd->stream, (uint64_t)gd->hStream);
        return;
    }
    if (cbid != SANITIZER_CBID_GRAPHS_NODE_LAUNCH_BEGIN) return;
    auto* nd = static_cast<const Sanitizer_GraphNodeLaunchData*>(cbdata);
    if (nd->nodeType != CU_GRAPH_NODE_TYPE_KERNEL || nd->isGraphUpload) return;
    t.node_callbacks.fetch_add(1, std::memory_order_relaxed);
    const Sanitizer_LaunchData& ld = nd->launchData;
    const uint32_t replay = t_replay.exec == nd->graphExec ? t_replay.id : nd->launchId;
    if (ContextState* s = context_state(ld.context, ld.device, true)) {
        const bool body = t.graphs.in_conditional_body(nd->graphExec, nd->node);
        if (body) t.graphs.note_body_kernel(ld.functionName ? ld.functionName : "(unnamed)");
        if (s->on_launch({&ld, (uint64_t)ld.hApiStream, replay, true, body}))
            t_fill_check = s;  // checked at the replay's end
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
        if (std::getenv("GPUOBS_DEBUG"))
            GPUOBS_LOG("graph exec change: %s", cd->functionName ? cd->functionName : "(unnamed driver call)");
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
                on_launch_api(domain, cbid, static_cast<const Sanitizer_CallbackData*>(cbdata));
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
    if (t.config.pack_metadata) {  // before the file opens (at the first context); without zlib, fail open
        if (t.packer.load(t.config.zlib_library.c_str(), &error))
            t.file.set_packer(&t.packer);
        else
            GPUOBS_LOG("%s; launch tables are written unpacked", error.c_str());
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
    // Modes that fill rings check them when a launch API call returns (ring pressure).
    const uint32_t m = t.config.mode;
    if (fills_rings(m)) {
        for (Sanitizer_CallbackId id : kLaunchDriverApis)
            sanitizer().enable_callback(1, t.subscriber, SANITIZER_CB_DOMAIN_DRIVER_API, id);
        for (Sanitizer_CallbackId id : kLaunchRuntimeApis)
            sanitizer().enable_callback(1, t.subscriber, SANITIZER_CB_DOMAIN_RUNTIME_API, id);
    }
    if (t.config.api_trace)
        for (Sanitizer_CallbackDomain d : {SANITIZER_CB_DOMAIN_DRIVER_API, SANITIZER_CB_DOMAIN_RUNTIME_API})
            sanitizer().enable_domain(1, t.subscriber, d);
    t.paused = t.config.start_paused;
    install_crash_drain();
    t.active = true;
    update_node_callbacks();
    if (std::getenv("GPUOBS_DEBUG"))
        GPUOBS_LOG("pid %d: recording %s to %s with %s", (int)getpid(), mode_name(t.config.mode),
                   t.config.output.c_str(), sanitizer().path.c_str());
    return true;
}

// The tool starts once per process, whichever way it came in: LD_PRELOAD (this
// constructor, before main), gpuobs.attach() (the constructor, at its dlopen), or
// CUDA_INJECTION64_PATH (the driver dlopens it at cuInit, so the constructor runs
// then, and calls InitializeInjection after). `gpuobs record` sets both, to one path,
// so that a child whose environment lost LD_PRELOAD is still recorded. A second copy
// of the library (another path to another build) finds GPUOBS_STARTED_PID naming
// this process and stays off: two tools would patch every module twice.
void start_once(const char* how) {
    static std::atomic<bool> begun{false};
    if (begun.exchange(true)) return;
    const std::string me = std::to_string(getpid());
    if (const char* started = std::getenv("GPUOBS_STARTED_PID"); started != nullptr && me == started) {
        if (std::getenv("GPUOBS_DEBUG"))
            GPUOBS_LOG("pid %s: another copy of the tool runs in this process; this one (%s) stays off", me.c_str(),
                       how);
        return;
    }
    setenv("GPUOBS_STARTED_PID", me.c_str(), 1);
    if (std::getenv("GPUOBS_DEBUG")) GPUOBS_LOG("pid %s: tool starting (%s)", me.c_str(), how);
    g_tool = new Tool();
    try {
        start();
    } catch (...) {
        GPUOBS_LOG("internal error at start; running uninstrumented");
        g_tool->active = false;
    }
}

__attribute__((constructor)) void gpuobs_init() { start_once("loaded"); }

__attribute__((destructor)) void gpuobs_fini() { finish_recording("process exit"); }

}  // namespace

// Every exit path that can end the file: the destructor at exit(), and _exit / _Exit
// (exit_paths.cpp), which CPython's forkserver and fork children leave through. The
// file is finished once, and only by the process that opened it (a forked child holds
// a copy of its parent's file).
void finish_recording(const char* why) {
    static std::atomic<bool> finished{false};
    if (g_tool == nullptr || !g_tool->active || !g_tool->file.is_open() || !g_tool->file.opened_here()) return;
    if (finished.exchange(true)) return;
    Tool& t = *g_tool;
    try {
        if (std::getenv("GPUOBS_DEBUG"))
            GPUOBS_LOG("%s: callbacks: launch %llu, graph node %llu, graph launch %llu, sync %llu", why,
                       (unsigned long long)t.launch_callbacks.load(), (unsigned long long)t.node_callbacks.load(),
                       (unsigned long long)t.graph_launches.load(), (unsigned long long)t.sync_callbacks.load());
        // Contexts the program never destroyed still hold events: flush them
        // (destroyed ones were flushed at CONTEXT_DESTROY_STARTING).
        stop_all_measuring();
        flush_all(why, false);
        t.active = false;  // no callback may touch the file after this
        gpuobs_end_info end;
        std::memset(&end, 0, sizeof end);
        end.end_monotonic_ns = monotonic_ns();
        end.launches = t.launch_callbacks.load() + t.node_callbacks.load();
        t.file.write_chunk(GPUOBS_CHUNK_END, {{&end, sizeof end}});
        t.file.close();
    } catch (...) {}
}

}  // namespace gpuobs

// CUDA_INJECTION64_PATH's entry point: the driver calls it once the library is loaded,
// inside cuInit. 1: keep the library loaded (it is already started, or has stood down
// and said why: the program runs either way).
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    gpuobs::start_once("CUDA_INJECTION64_PATH");
    return 1;
}
