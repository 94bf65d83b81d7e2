// cuda_graph.cpp — the real driver's stream-capture and graph calls: begin/end capture,
// instantiate (with cudaGraphInstantiateFlagAutoFreeOnLaunch on request), launch, destroy, and
// the trim of the device's graph-allocation memory. Like the rest of cuda_driver, each call is a
// thin translation with no policy; docs/graph-capture.md has the rules the callers follow.
#include "driver/cuda_driver.hpp"

#include "driver/cuda_scopes.hpp"

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

drv_result cuda_driver::stream_begin_capture(stream_t stream, capture_mode mode) noexcept {
  return runtime_result(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), native_mode(mode)));
}

drv_result cuda_driver::stream_end_capture(stream_t stream, graph_t* out) noexcept {
  cudaGraph_t graph = nullptr;
  const cudaError_t error = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  *out = error == cudaSuccess ? graph : nullptr;
  return runtime_result(error);
}

drv_result cuda_driver::graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]: another capture may be open
  unsigned long long native_flags = 0;
  if (has_flag(flags, instantiate_flags::auto_free_on_launch)) {
    native_flags |= cudaGraphInstantiateFlagAutoFreeOnLaunch;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t error = cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(graph), native_flags);
  *out = error == cudaSuccess ? exec : nullptr;
  return runtime_result(error);
}

drv_result cuda_driver::graph_launch(graph_exec_t exec, stream_t stream) noexcept {
  return runtime_result(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::graph_exec_destroy(graph_exec_t exec) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]: another capture may be open
  return runtime_result(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

drv_result cuda_driver::graph_destroy(graph_t graph) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]: another capture may be open
  return runtime_result(cudaGraphDestroy(static_cast<cudaGraph_t>(graph)));
}

drv_result cuda_driver::graph_mem_trim(int device) noexcept {
  const relaxed_thread_scope relaxed(*this, true);  // Note [Relaxed queries]
  return runtime_result(cudaDeviceGraphMemTrim(device));
}

drv_result cuda_driver::thread_exchange_capture_mode(capture_mode* mode) noexcept {
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

}  // namespace streampool::driver_impl
