// cuda_host.cpp — the real driver's pinned-host-memory calls: cudaHostAlloc / cudaFreeHost,
// cudaHostRegister / cudaHostUnregister, and cudaMemcpyAsync for the copies that read pinned
// buffers (the harness's copy loop, the GPU tests). Used by the host allocator (src/host).
#include "driver/cuda/cuda_driver.hpp"

namespace streampool::driver_impl {

drv_result cuda_driver::host_alloc(std::size_t bytes, void** out) noexcept {
  *out = nullptr;
  if (bytes == 0) return {status::invalid_value, static_cast<int>(cudaErrorInvalidValue)};
  return runtime_result(cudaHostAlloc(out, bytes, cudaHostAllocDefault));
}

drv_result cuda_driver::host_free(void* ptr) noexcept {
  if (ptr == nullptr) return {};
  return runtime_result(cudaFreeHost(ptr));
}

drv_result cuda_driver::host_register(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr || bytes == 0) return {status::invalid_value, static_cast<int>(cudaErrorInvalidValue)};
  return runtime_result(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
}

drv_result cuda_driver::host_unregister(void* ptr) noexcept {
  if (ptr == nullptr) return {status::invalid_value, static_cast<int>(cudaErrorInvalidValue)};
  return runtime_result(cudaHostUnregister(ptr));
}

drv_result cuda_driver::memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) noexcept {
  if (bytes == 0) return {};
  return runtime_result(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

}  // namespace streampool::driver_impl
