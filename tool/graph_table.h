// What the tool knows of each executable CUDA graph, so that replays are
// attributed without per-node callbacks. Per-node callbacks make the driver
// launch a replay node by node from the host (the decode step: 1.37x with them
// on, nothing patched); a kernel node's %gridid is the same on every replay of
// its exec (measured on the H200). So the tool listens to one replay of each
// new exec node by node ("learning"), keeps its kernel nodes, turns the
// callbacks off, and lists every later replay from that table at the replay's
// one LAUNCH_BEGIN callback. Execs whose replays can differ (conditional nodes,
// device graph launch) keep the callbacks on while they live; an exec update
// (cuGraphExec*SetParams, cuGraphExecUpdate, cuGraphNodeSetEnabled) sends every
// exec back to learning.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gpuobs {

struct LearnedNode {
    CUgraphNode node;
    uint32_t index;  // in the order the learning replay launched it
    uint64_t grid_id;
    CUfunction function;
    CUmodule module;
    std::string name;
    uint32_t grid[3];
    uint32_t block[3];
};

class GraphTable {
public:
    enum class Source { kNodeCallbacks, kTable };

    void on_created(CUgraphExec exec, CUgraph graph, bool device_launch);
    void on_destroying(CUgraphExec exec);
    // Any exec update: learned tables may be stale.
    void invalidate_all();
    size_t live() const;

    // A replay starts. callbacks_on: whether node callbacks are enabled now.
    // Returns how its kernels are listed; kTable fills `nodes`.
    Source begin_replay(CUgraphExec exec, bool callbacks_on, std::vector<LearnedNode>* nodes);
    // A kernel node of a replay listed by callbacks: learned when its exec is learning.
    void on_node(CUgraphExec exec, uint32_t launch_id, const LearnedNode& node);
    void end_replay(CUgraphExec exec, Source source);
    // True while some exec needs per-node callbacks, or a replay that relies on
    // them is in flight (turning them off then would cut it short).
    bool needs_node_callbacks() const;
    // Whether a kernel node of a replay of `exec` lies inside a conditional node's body
    // (WHILE, IF, SWITCH): the driver reports such a node once per replay however often
    // the device runs it. The driver API gives no way to read a conditional node's body
    // graphs back from a graph, so a body node is told by what it is not: every kernel
    // node of the exec's graph and its child graphs is found at creation, outside the
    // conditional nodes; a node launched in a replay of an exec with conditional nodes
    // that is none of them is in a body.
    bool in_conditional_body(CUgraphExec exec, CUgraphNode node) const;
    // The first time a kernel is seen in a conditional body: its name is kept for the
    // recording's notice (take_new_body_kernels), once per process.
    void note_body_kernel(const std::string& name);
    std::vector<std::string> take_new_body_kernels();

private:
    enum class State { kLearning, kLearned, kDynamic };
    struct Exec {
        State state = State::kLearning;
        uint32_t learning_launch = 0;  // the sanitizer launch id whose nodes are being learned (0: none yet)
        std::vector<LearnedNode> nodes;
        bool conditional = false;
        std::unordered_set<CUgraphNode> outside_conditionals;  // kernel nodes not in a body
    };
    std::unordered_set<std::string> body_kernels_;
    std::vector<std::string> new_body_kernels_;
    mutable std::mutex mu_;
    std::unordered_map<CUgraphExec, Exec> execs_;
    int callback_replays_in_flight_ = 0;
};

// True when a graph (or a child graph of it) holds a conditional node, whose
// replays can launch different kernels. `kernels`, when given, gets every kernel node
// of the graph and its child graphs, outside conditional nodes.
bool graph_has_conditional_nodes(CUgraph graph, std::unordered_set<CUgraphNode>* kernels = nullptr);

}  // namespace gpuobs
