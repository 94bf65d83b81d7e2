// sim_graphs.hpp (internal) — the simulated device's fake graphs and graph executables: handles
// that are never reused, the device each belongs to, and liveness for leak checks; and the
// callbacks tied to a graph's lifetime (capture_on_graph_release, Note [Sim graph release] in
// sim_graph_calls.cpp). The capture sequences that produce graphs are in sim_capture.hpp; the
// driver calls are graph_calls' (sim_graph_calls.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "driver/sim/sim_common.hpp"

namespace streampool::sim {

class graph_book {
 public:
  /// A callback of capture_on_graph_release.
  struct release_hook {
    void (*on_release)(void*);
    void* arg;
  };
  struct graph_rec {
    int device = 0;
    bool alive = true;
    std::vector<release_hook> hooks;  ///< run once the graph and its executables are destroyed
    std::uint32_t live_execs = 0;
    std::uint64_t capture_id = 0;  ///< the capture it came from
  };
  struct exec_rec {
    int device = 0;
    bool alive = true;
    instantiate_flags flags = instantiate_flags::none;
    std::uint32_t graph = no_stream;  ///< index of the graph it was instantiated from
  };

  /// A new graph of `device`, taking the hooks registered for capture `capture_id`.
  [[nodiscard]] graph_t add_graph(int device, std::uint64_t capture_id) {
    graphs_.push_back(graph_rec{device, true, take_capture_hooks(capture_id), 0, capture_id});
    return static_cast<graph_t>(make_handle(graph_handle_base, static_cast<std::uint32_t>(graphs_.size() - 1)));
  }
  [[nodiscard]] graph_exec_t add_exec(graph_t graph, instantiate_flags flags) {
    const std::uint32_t index = handle_index(graph, graph_handle_base, graphs_.size());
    graph_rec& source = graphs_[index];
    ++source.live_execs;
    execs_.push_back(exec_rec{source.device, true, flags, index});
    return static_cast<graph_exec_t>(make_handle(exec_handle_base, static_cast<std::uint32_t>(execs_.size() - 1)));
  }
  void add_capture_hook(std::uint64_t capture_id, release_hook hook) { capture_hooks_[capture_id].push_back(hook); }
  /// The hooks of a capture that ended without a graph run now.
  void release_capture_hooks(std::uint64_t capture_id) noexcept {
    for (const release_hook& hook : take_capture_hooks(capture_id)) hook.on_release(hook.arg);
  }
  /// Marks a graph / executable destroyed; runs the graph's hooks once nothing made from it lives.
  void destroy_graph(graph_rec& graph) noexcept {
    graph.alive = false;
    release_graph_hooks(graph);
  }
  void destroy_exec(exec_rec& exec) noexcept {
    exec.alive = false;
    graph_rec& source = graphs_[exec.graph];
    --source.live_execs;
    release_graph_hooks(source);
  }
  /// A launch of `exec`: the graph-owned memory of its capture now exists (Note [Sim graph memory]).
  void mark_launched(const exec_rec& exec) { launched_captures_.insert(graphs_[exec.graph].capture_id); }
  /// True once some executable of the graph of capture `capture_id` was launched.
  [[nodiscard]] bool launched(std::uint64_t capture_id) const noexcept { return launched_captures_.count(capture_id) != 0; }
  /// The live graph / executable `handle` names, or nullptr.
  [[nodiscard]] graph_rec* find_graph(const void* handle) noexcept { return find_live(graphs_, handle, graph_handle_base); }
  [[nodiscard]] exec_rec* find_exec(const void* handle) noexcept { return find_live(execs_, handle, exec_handle_base); }
  [[nodiscard]] std::size_t live_graphs() const noexcept { return live(graphs_); }
  [[nodiscard]] std::size_t live_execs() const noexcept { return live(execs_); }

 private:
  template <class Rec>
  static Rec* find_live(std::vector<Rec>& recs, const void* handle, std::uintptr_t base) noexcept {
    const std::uint32_t index = handle_index(handle, base, recs.size());
    return index == no_stream || !recs[index].alive ? nullptr : &recs[index];
  }
  template <class Rec>
  static std::size_t live(const std::vector<Rec>& recs) noexcept {
    return static_cast<std::size_t>(std::count_if(recs.begin(), recs.end(), [](const Rec& r) { return r.alive; }));
  }

  std::vector<release_hook> take_capture_hooks(std::uint64_t capture_id) noexcept {
    std::vector<release_hook> hooks;
    if (const auto found = capture_hooks_.find(capture_id); found != capture_hooks_.end()) {
      hooks = std::move(found->second);
      capture_hooks_.erase(found);
    }
    return hooks;
  }
  static void release_graph_hooks(graph_rec& graph) noexcept {
    if (graph.alive || graph.live_execs != 0) return;
    std::vector<release_hook> hooks = std::move(graph.hooks);
    graph.hooks.clear();
    for (const release_hook& hook : hooks) hook.on_release(hook.arg);
  }

  std::vector<graph_rec> graphs_;
  std::vector<exec_rec> execs_;
  /// capture_on_graph_release hooks of captures not yet ended, by capture id.
  std::map<std::uint64_t, std::vector<release_hook>> capture_hooks_;
  std::set<std::uint64_t> launched_captures_;  ///< captures whose graph was launched at least once
};

}  // namespace streampool::sim
