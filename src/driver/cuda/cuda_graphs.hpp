// cuda_graphs.hpp (internal) — the real driver's stream-capture and graph calls (cuda_graphs):
// begin/end capture, instantiate, launch, destroy, the trim of graph-allocation memory, the
// thread's capture mode, and callbacks tied to a captured graph's lifetime. cuda_driver's calls of
// the same names delegate here.
#pragma once

#include "streampool/driver.hpp"

namespace streampool::driver_impl {

/// Capture and graph calls over the CUDA runtime. Stateless; `self` is the driver they belong to,
/// whose thread_exchange_capture_mode the calls that run in relaxed capture mode use
/// (relaxed_thread_scope; Note [Relaxed queries] in cuda_driver.cpp).
class cuda_graphs {
 public:
  static drv_result begin_capture(stream_t stream, capture_mode mode) noexcept;
  static drv_result end_capture(stream_t stream, graph_t* out) noexcept;
  static drv_result instantiate(driver& self, graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept;
  static drv_result launch(graph_exec_t exec, stream_t stream) noexcept;
  static drv_result exec_destroy(driver& self, graph_exec_t exec) noexcept;
  static drv_result destroy(driver& self, graph_t graph) noexcept;
  static drv_result mem_trim(driver& self, int device) noexcept;
  static drv_result exchange_capture_mode(capture_mode* mode) noexcept;
  static drv_result on_graph_release(driver& self, stream_t stream, void (*on_release)(void*), void* arg) noexcept;
  static drv_result capture_dependencies(stream_t stream, std::vector<graph_node_t>* out) noexcept;
  static drv_result node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) noexcept;
};

}  // namespace streampool::driver_impl
