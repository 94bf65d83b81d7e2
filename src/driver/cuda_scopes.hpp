// cuda_scopes.hpp — the real driver's RAII helpers: device_scope (makes a device current for a
// call and restores the previous one) and relaxed_capture_scope (runs a non-stream CUDA call with
// the calling thread in relaxed capture mode; Note [Relaxed queries]). Internal to src/driver/cuda_*.
#pragma once

#include <cuda_runtime_api.h>

namespace streampool::detail {

/// Makes `device` current for the scope if it is not already, and restores the previous one
/// (memory calls, memsets and kernels go to the current device's context).
class device_scope {
 public:
  explicit device_scope(int device) noexcept {
    error_ = cudaGetDevice(&previous_);
    if (error_ == cudaSuccess && previous_ != device) {
      error_ = cudaSetDevice(device);
      switched_ = error_ == cudaSuccess;
    }
  }
  ~device_scope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

  [[nodiscard]] cudaError_t error() const noexcept { return error_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  cudaError_t error_ = cudaSuccess;
};

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
