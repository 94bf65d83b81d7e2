// cuda_capture_mode.hpp — relaxed_capture_scope: runs a non-stream CUDA call with the calling
// thread in relaxed capture mode and puts the caller's mode back (Note [Relaxed queries]).
// Internal to the real driver (cuda_driver.cpp, cuda_graph.cpp).
#pragma once

#include <cuda_runtime_api.h>

namespace streampool::detail {

// Note [Relaxed queries]
// Pool attribute reads and writes, cudaMemGetInfo, device properties, pool creation and graph
// instantiation/destruction are "potentially unsafe" calls: while the calling thread is in a global
// or thread-local capture (or any thread is in a global one) they fail with
// cudaErrorStreamCaptureUnsupported AND invalidate the capture. Seen on the H200 (2026-11-30,
// scripts/probes/capture_rules_probe.cpp): with captures A and B open on one thread,
// cudaGraphInstantiate of B after B ended failed and invalidated A; the same call in relaxed mode
// succeeded and A stayed active. Pool reads for statistics, lazy per-device setup on a first
// allocation made inside a capture, and a graph instantiated while another capture is open all hit
// this. None of these calls is a stream operation, so, like Note [Relaxed cudaMalloc], they run
// with this thread in relaxed capture mode; outside capture that costs two cheap calls, and none of
// them is on an allocation's hot path.
class relaxed_capture_scope {
 public:
  relaxed_capture_scope() noexcept { ok_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess; }
  ~relaxed_capture_scope() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);  // `mode_` holds the caller's mode
  }
  relaxed_capture_scope(const relaxed_capture_scope&) = delete;
  relaxed_capture_scope& operator=(const relaxed_capture_scope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = false;
};

}  // namespace streampool::detail
