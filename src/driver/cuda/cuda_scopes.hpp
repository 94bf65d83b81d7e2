// cuda_scopes.hpp — the real driver's RAII helper device_scope (makes a device current for a call
// and restores the previous one). Relaxed capture mode has one helper for everyone,
// relaxed_thread_scope in streampool/driver.hpp. Internal to src/driver/cuda/.
#pragma once

#include <cuda_runtime_api.h>

namespace streampool::driver_impl {

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

}  // namespace streampool::driver_impl
