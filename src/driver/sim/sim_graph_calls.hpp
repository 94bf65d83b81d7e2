// sim_graph_calls.hpp (internal) — the simulated device's capture and graph calls (graph_calls):
// stream_begin_capture / stream_end_capture, callbacks tied to a graph's lifetime, and fake graphs
// and executables (graph_book, sim_graphs.hpp). Capture state and its rules are capture_model's
// (sim_capture.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "driver/sim/sim_device.hpp"

namespace streampool::sim {

/// sim_driver's capture and graph calls on a device_model; they run under the device's mutex
/// (sim_driver::state::run).
class graph_calls {
 public:
  explicit graph_calls(device_model& device) noexcept : device_(device) {}

  drv_result stream_begin_capture(stream_t stream, capture_mode mode);
  drv_result stream_end_capture(stream_t stream, graph_t* out);
  drv_result capture_on_graph_release(stream_t stream, void (*on_release)(void*), void* arg);
  drv_result graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags);
  drv_result graph_launch(graph_exec_t exec, stream_t stream);
  drv_result graph_exec_destroy(graph_exec_t exec);
  drv_result graph_destroy(graph_t graph);
  drv_result graph_mem_trim(int device);
  drv_result capture_dependencies(stream_t stream, std::vector<graph_node_t>* out);
  drv_result graph_node_dependencies(graph_node_t node, std::vector<graph_node_t>* out);

 private:
  device_model& device_;
};

}  // namespace streampool::sim
