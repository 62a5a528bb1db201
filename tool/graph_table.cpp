#include "graph_table.h"

#include "cuda_driver.h"

namespace gpuobs {

bool graph_has_conditional_nodes(CUgraph graph) {
    CudaDriver& d = driver();
    if (d.graph_get_nodes == nullptr || d.graph_node_get_type == nullptr) return false;
    size_t n = 0;
    if (d.graph_get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) return false;
    std::vector<CUgraphNode> nodes(n);
    if (d.graph_get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return false;
    for (CUgraphNode node : nodes) {
        CUgraphNodeType type;
        if (d.graph_node_get_type(node, &type) != CUDA_SUCCESS) continue;
        if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) return true;
        CUgraph child = nullptr;
        if (type == CU_GRAPH_NODE_TYPE_GRAPH && d.graph_child_graph != nullptr &&
            d.graph_child_graph(node, &child) == CUDA_SUCCESS && child != nullptr && graph_has_conditional_nodes(child))
            return true;
    }
    return false;
}

void GraphTable::on_created(CUgraphExec exec, CUgraph graph, bool device_launch) {
    const bool dynamic = device_launch || (graph != nullptr && graph_has_conditional_nodes(graph));
    std::lock_guard<std::mutex> lock(mu_);
    Exec& e = execs_[exec];
    e = Exec();
    if (dynamic) e.state = State::kDynamic;
}

void GraphTable::on_destroying(CUgraphExec exec) {
    std::lock_guard<std::mutex> lock(mu_);
    execs_.erase(exec);
}

void GraphTable::invalidate_all() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [exec, e] : execs_)
        if (e.state == State::kLearned) e = Exec();
}

size_t GraphTable::live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return execs_.size();
}

GraphTable::Source GraphTable::begin_replay(CUgraphExec exec, bool callbacks_on, std::vector<LearnedNode>* nodes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(exec);
    if (it == execs_.end()) it = execs_.emplace(exec, Exec()).first;  // created before the tool listened
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
    if (e.state == State::kLearning && source == Source::kNodeCallbacks) e.state = State::kLearned;
}

bool GraphTable::needs_node_callbacks() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (callback_replays_in_flight_ > 0) return true;
    for (const auto& [exec, e] : execs_)
        if (e.state != State::kLearned) return true;
    return false;
}

}  // namespace gpuobs
