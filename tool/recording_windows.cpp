// Recording windows: gpuobs.pause() and gpuobs.resume(), and the automatic
// windows that turn at a context's quiet points, all through the contexts'
// record gates (the patches stay in place); the graph node callbacks, which are
// on only while something records.
#include <mutex>

#include "config.h"
#include "context_state.h"
#include "log.h"
#include "sanitizer_api.h"
#include "tool_state.h"

namespace gpuobs {

size_t live_graphs() { return g_tool->graphs.live(); }

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

// Automatic windows: at a quiet point of a context (none of its kernels runs),
// the interval that starts now is recorded or not (one in --window-every); the
// context's gate follows. (A duty cycle turns the sample gate instead: sampler.h.)
void turn_window(ContextState* s) {
    const bool record = s->next_interval_recorded(g_tool->config.window_every);
    if (record == !s->paused()) return;
    if (s->set_paused(!record)) update_node_callbacks();
}

// gpuobs.pause() / gpuobs.resume(): every context is synchronised first, so no
// kernel runs while its gate turns; CUDA graphs, whenever instantiated, follow
// (their kernels run the same patched code). Returns the contexts turned (one
// that cannot be keeps its state and says so; the others turn).
int set_recording(bool on) {
    Tool& t = *g_tool;
    std::lock_guard<std::mutex> lock(t.window_mu);
    if (t.paused == !on) return 0;
    int turned = 0;
    for (auto& [ctx, state] : all_contexts()) {
        synchronize_context(ctx);
        if (!on) state->flush("pause");
        turned += state->set_paused(!on) ? 1 : 0;
    }
    t.paused = !on;
    update_node_callbacks();
    if (t.config.api_trace) t.api.write_pending(t.file);
    return turned;
}

}  // namespace gpuobs
