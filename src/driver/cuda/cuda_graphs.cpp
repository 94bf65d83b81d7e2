// cuda_graphs.cpp — the real driver's stream-capture and graph calls (cuda_graphs): begin/end
// capture, instantiate (with cudaGraphInstantiateFlagAutoFreeOnLaunch on request), launch,
// destroy, the trim of the device's graph-allocation memory, and a callback tied to a captured
// graph's lifetime (a user object). Like the rest of cuda_driver, each call is a thin translation
// with no policy; docs/graph-capture.md has the rules the callers follow.
#include "driver/cuda/cuda_graphs.hpp"

#include "driver/cuda/cuda_driver.hpp"

#include <new>
#include <vector>

#include "driver/cuda/cuda_scopes.hpp"

namespace streampool::driver_impl {
namespace {

cudaStreamCaptureMode native_mode(capture_mode mode) noexcept {
  switch (mode) {
    case capture_mode::global: return cudaStreamCaptureModeGlobal;
    case capture_mode::thread_local_: return cudaStreamCaptureModeThreadLocal;
    case capture_mode::relaxed: return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeGlobal;
}

}  // namespace

drv_result cuda_graphs::begin_capture(stream_t stream, capture_mode mode) noexcept {
  return runtime_result(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), native_mode(mode)));
}

drv_result cuda_graphs::end_capture(stream_t stream, graph_t* out) noexcept {
  cudaGraph_t graph = nullptr;
  const cudaError_t error = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  *out = error == cudaSuccess ? graph : nullptr;
  return runtime_result(error);
}

drv_result cuda_graphs::instantiate(driver& self, graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept {
  const relaxed_thread_scope relaxed(self, true);  // Note [Relaxed queries]: another capture may be open
  unsigned long long native_flags = 0;
  if (has_flag(flags, instantiate_flags::auto_free_on_launch)) {
    native_flags |= cudaGraphInstantiateFlagAutoFreeOnLaunch;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t error = cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(graph), native_flags);
  *out = error == cudaSuccess ? exec : nullptr;
  return runtime_result(error);
}

drv_result cuda_graphs::launch(graph_exec_t exec, stream_t stream) noexcept {
  return runtime_result(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}

drv_result cuda_graphs::exec_destroy(driver& self, graph_exec_t exec) noexcept {
  const relaxed_thread_scope relaxed(self, true);  // Note [Relaxed queries]: another capture may be open
  return runtime_result(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

drv_result cuda_graphs::destroy(driver& self, graph_t graph) noexcept {
  const relaxed_thread_scope relaxed(self, true);  // Note [Relaxed queries]: another capture may be open
  return runtime_result(cudaGraphDestroy(static_cast<cudaGraph_t>(graph)));
}

drv_result cuda_graphs::mem_trim(driver& self, int device) noexcept {
  const relaxed_thread_scope relaxed(self, true);  // Note [Relaxed queries]
  return runtime_result(cudaDeviceGraphMemTrim(device));
}

drv_result cuda_graphs::exchange_capture_mode(capture_mode* mode) noexcept {
  if (mode == nullptr) return runtime_result(cudaErrorInvalidValue);
  cudaStreamCaptureMode native = native_mode(*mode);
  const cudaError_t error = cudaThreadExchangeStreamCaptureMode(&native);
  if (error == cudaSuccess) {
    *mode = native == cudaStreamCaptureModeRelaxed      ? capture_mode::relaxed
            : native == cudaStreamCaptureModeThreadLocal ? capture_mode::thread_local_
                                                         : capture_mode::global;
  }
  return runtime_result(error);
}

namespace {

// Note [Graph release callbacks]
// A user object's destructor runs when its last reference goes: here the one the capture's graph
// holds (moved in by cudaGraphRetainUserObject), which executables instantiated from the graph
// share, so it runs once the graph and every executable are destroyed and their launches done,
// on a CUDA thread. If retaining fails, the object's only reference is ours and releasing it runs
// the destructor at once: the trampoline is disarmed first, so a failed call never calls back.
struct release_trampoline {
  void (*on_release)(void*);
  void* arg;
  bool armed;
};

void CUDART_CB run_release_trampoline(void* data) {
  auto* trampoline = static_cast<release_trampoline*>(data);
  if (trampoline->armed) trampoline->on_release(trampoline->arg);
  delete trampoline;
}

}  // namespace

drv_result cuda_graphs::on_graph_release(driver& self, stream_t stream, void (*on_release)(void*), void* arg) noexcept {
  if (on_release == nullptr) return runtime_result(cudaErrorInvalidValue);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  if (const cudaError_t error =
          cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &capture, nullptr, &graph);
      error != cudaSuccess) {
    return runtime_result(error);
  }
  if (capture != cudaStreamCaptureStatusActive || graph == nullptr) return runtime_result(cudaErrorInvalidValue);
  auto* trampoline = new (std::nothrow) release_trampoline{on_release, arg, true};
  if (trampoline == nullptr) return runtime_result(cudaErrorMemoryAllocation);
  const relaxed_thread_scope relaxed(self, true);  // Note [Relaxed queries]: not a stream operation
  cudaUserObject_t object = nullptr;
  if (const cudaError_t error =
          cudaUserObjectCreate(&object, trampoline, run_release_trampoline, 1, cudaUserObjectNoDestructorSync);
      error != cudaSuccess) {
    delete trampoline;
    return runtime_result(error);
  }
  const cudaError_t error = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (error != cudaSuccess) {
    trampoline->armed = false;           // Note [Graph release callbacks]
    (void)cudaUserObjectRelease(object, 1);  // runs the (disarmed) trampoline, which deletes itself
  }
  return runtime_result(error);
}

// The edge data is asked for too (and ignored): without it CUDA refuses a query whose edges are
// not the default ones (cudaErrorLossyQuery).
drv_result cuda_graphs::capture_dependencies(stream_t stream, std::vector<graph_node_t>* out) noexcept {
  if (out == nullptr) return runtime_result(cudaErrorInvalidValue);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* nodes = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  std::size_t count = 0;
  const cudaError_t error =
      cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &status, nullptr, nullptr, &nodes, &edges, &count);
  if (error != cudaSuccess) return runtime_result(error);
  try {
    out->clear();
    if (status == cudaStreamCaptureStatusActive) {
      for (std::size_t i = 0; i < count; ++i) out->push_back(static_cast<graph_node_t>(nodes[i]));
    }
  } catch (...) {
    return runtime_result(cudaErrorMemoryAllocation);
  }
  return {};
}

drv_result cuda_graphs::node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) noexcept {
  if (out == nullptr) return runtime_result(cudaErrorInvalidValue);
  const auto graph_node = static_cast<cudaGraphNode_t>(node);
  std::size_t count = 0;
  cudaError_t error = cudaGraphNodeGetDependencies(graph_node, nullptr, nullptr, &count);
  if (error != cudaSuccess) return runtime_result(error);
  try {
    std::vector<cudaGraphNode_t> nodes(count);
    std::vector<cudaGraphEdgeData> edges(count);
    if (count != 0) error = cudaGraphNodeGetDependencies(graph_node, nodes.data(), edges.data(), &count);
    if (error != cudaSuccess) return runtime_result(error);
    out->clear();
    for (std::size_t i = 0; i < count && i < nodes.size(); ++i) out->push_back(static_cast<graph_node_t>(nodes[i]));
  } catch (...) {
    return runtime_result(cudaErrorMemoryAllocation);
  }
  return {};
}

}  // namespace streampool::driver_impl
