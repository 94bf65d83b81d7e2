// sim_memory_calls.hpp (internal) — the simulated device's memory calls (memory_calls):
// mem_get_info, cudaMalloc / cudaFree, the VMM calls with their device checks, capture refusal
// and hazard check, and the pinned-host calls that synchronise or submit work. The bookkeeping is
// in malloc_heap, vmm_space and host_memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "driver/sim/sim_device.hpp"

namespace streampool::sim {

/// sim_driver's memory calls on a device_model; they run under the device's mutex
/// (sim_driver::state::run).
class memory_calls {
 public:
  explicit memory_calls(device_model& device) noexcept : device_(device) {}

  drv_result mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes);
  drv_result malloc(int device, std::size_t bytes, void** out);
  drv_result free(int device, void* ptr);
  drv_result vmm_reserve(int device, std::size_t bytes, std::size_t alignment, void** va);
  drv_result vmm_create(int device, std::size_t bytes, vmm_handle_t* out);
  drv_result vmm_release(vmm_handle_t handle);
  drv_result vmm_import_fd(int fd, vmm_handle_t* out);
  drv_result vmm_set_access(void* va, std::size_t bytes, int device);
  drv_result vmm_unmap(void* va, std::size_t bytes);
  drv_result host_free(void* ptr);
  drv_result memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream);

 private:
  device_model& device_;
};

}  // namespace streampool::sim
