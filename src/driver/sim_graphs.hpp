// sim_graphs.hpp (internal) — the simulated device's fake graphs and graph executables: handles
// that are never reused, the device each belongs to, and liveness for leak checks. The capture
// sequences that produce graphs are in sim_capture.hpp; the driver calls in sim_graph.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "driver/sim_common.hpp"

namespace streampool::sim {

class graph_book {
 public:
  struct graph_rec {
    int device = 0;
    bool alive = true;
  };
  struct exec_rec {
    int device = 0;
    bool alive = true;
    instantiate_flags flags = instantiate_flags::none;
  };

  [[nodiscard]] graph_t add_graph(int device) {
    graphs_.push_back(graph_rec{device, true});
    return static_cast<graph_t>(make_handle(graph_handle_base, static_cast<std::uint32_t>(graphs_.size() - 1)));
  }
  [[nodiscard]] graph_exec_t add_exec(int device, instantiate_flags flags) {
    execs_.push_back(exec_rec{device, true, flags});
    return static_cast<graph_exec_t>(make_handle(exec_handle_base, static_cast<std::uint32_t>(execs_.size() - 1)));
  }
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

  std::vector<graph_rec> graphs_;
  std::vector<exec_rec> execs_;
};

}  // namespace streampool::sim
