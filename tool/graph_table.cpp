#include "graph_table.h"

#include <cstdlib>

#include "cuda_driver.h"
#include "log.h"

namespace gpuobs {

namespace {
// GPUOBS_DEBUG=1: what happens to each exec, for finding replays the tool cannot
// attribute (benchmarks/jax_launch_paths.py reads these lines). A function-local
// static: no static-initialisation order against the tool's constructor.
bool debug() {
    static const bool on = std::getenv("GPUOBS_DEBUG") != nullptr;
    return on;
}
}  // namespace

bool graph_has_conditional_nodes(CUgraph graph, std::unordered_set<CUgraphNode>* kernels) {
    CudaDriver& d = driver();
    if (d.graph_get_nodes == nullptr || d.graph_node_get_type == nullptr) return false;
    size_t n = 0;
    if (d.graph_get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) return false;
    std::vector<CUgraphNode> nodes(n);
    if (d.graph_get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return false;
    bool conditional = false;
    for (CUgraphNode node : nodes) {
        CUgraphNodeType type;
        if (d.graph_node_get_type(node, &type) != CUDA_SUCCESS) continue;
        if (type == CU_GRAPH_NODE_TYPE_KERNEL && kernels != nullptr) kernels->insert(node);
        if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            conditional = true;
            if (kernels == nullptr) return true;
        }
        CUgraph child = nullptr;
        if (type == CU_GRAPH_NODE_TYPE_GRAPH && d.graph_child_graph != nullptr &&
            d.graph_child_graph(node, &child) == CUDA_SUCCESS && child != nullptr &&
            graph_has_conditional_nodes(child, kernels)) {
            conditional = true;
            if (kernels == nullptr) return true;
        }
    }
    return conditional;
}

void GraphTable::on_created(CUgraphExec exec, CUgraph graph, bool device_launch) {
    std::unordered_set<CUgraphNode> outside;
    const bool conditional = graph != nullptr && graph_has_conditional_nodes(graph, &outside);
    const bool dynamic = device_launch || conditional;
    if (debug())
        GPUOBS_LOG("graph exec %p created from graph %p: %s", (void*)exec, (void*)graph,
                   device_launch ? "device-launchable, node callbacks stay on"
                   : conditional ? "has conditional nodes, node callbacks stay on"
                                 : "learned at its first replay");
    std::lock_guard<std::mutex> lock(mu_);
    Exec& e = execs_[exec];
    e = Exec();
    if (dynamic) e.state = State::kDynamic;
    e.conditional = conditional;
    if (conditional) e.outside_conditionals.swap(outside);
}

bool GraphTable::in_conditional_body(CUgraphExec exec, CUgraphNode node) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(exec);
    return it != execs_.end() && it->second.conditional && !it->second.outside_conditionals.count(node);
}

void GraphTable::note_body_kernel(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    if (body_kernels_.insert(name).second) new_body_kernels_.push_back(name);
}

std::vector<std::string> GraphTable::take_new_body_kernels() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    out.swap(new_body_kernels_);
    return out;
}

void GraphTable::on_destroying(CUgraphExec exec) {
    if (debug()) GPUOBS_LOG("graph exec %p destroyed", (void*)exec);
    std::lock_guard<std::mutex> lock(mu_);
    execs_.erase(exec);
}

void GraphTable::invalidate_all() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t sent = 0;
    for (auto& [exec, e] : execs_)
        if (e.state == State::kLearned) {
            e = Exec();
            ++sent;
        }
    if (debug()) GPUOBS_LOG("graph exec update: %zu learned exec(s) sent back to learning", sent);
}

size_t GraphTable::live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return execs_.size();
}

GraphTable::Source GraphTable::begin_replay(CUgraphExec exec, bool callbacks_on, std::vector<LearnedNode>* nodes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(exec);
    if (it == execs_.end()) {  // created before the tool listened
        if (debug()) GPUOBS_LOG("graph exec %p replayed, never seen created: learned now", (void*)exec);
        it = execs_.emplace(exec, Exec()).first;
    }
    if (it->second.state == State::kLearned && !callbacks_on) {
        *nodes = it->second.nodes;
        return Source::kTable;
    }
    ++callback_replays_in_flight_;
    return Source::kNodeCallbacks;
}

void GraphTable::on_node(CUgraphExec exec, uint32_t launch_id, const LearnedNode& node) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(exec);
    if (it == execs_.end() || it->second.state != State::kLearning) return;
    Exec& e = it->second;
    if (e.learning_launch == 0) e.learning_launch = launch_id;
    if (e.learning_launch != launch_id) return;  // another replay of it, on another thread
    e.nodes.push_back(node);
    e.nodes.back().index = (uint32_t)e.nodes.size() - 1;
}

void GraphTable::end_replay(CUgraphExec exec, Source source) {
    std::lock_guard<std::mutex> lock(mu_);
    if (source == Source::kNodeCallbacks && callback_replays_in_flight_ > 0) --callback_replays_in_flight_;
    auto it = execs_.find(exec);
    if (it == execs_.end()) return;
    Exec& e = it->second;
    // Learned once a replay listed node by node has ended (a graph with no
    // kernel node is learned as empty).
    if (e.state == State::kLearning && source == Source::kNodeCallbacks) {
        e.state = State::kLearned;
        if (debug())
            GPUOBS_LOG("graph exec %p learned from replay %u: %zu kernel node(s), grid ids %llu..%llu", (void*)exec,
                       e.learning_launch, e.nodes.size(),
                       e.nodes.empty() ? 0ull : (unsigned long long)e.nodes.front().grid_id,
                       e.nodes.empty() ? 0ull : (unsigned long long)e.nodes.back().grid_id);
    }
}

bool GraphTable::needs_node_callbacks() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (callback_replays_in_flight_ > 0) return true;
    for (const auto& [exec, e] : execs_)
        if (e.state != State::kLearned) return true;
    return false;
}

}  // namespace gpuobs
