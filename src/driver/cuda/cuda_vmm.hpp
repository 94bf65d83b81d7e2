// cuda_vmm.hpp (internal) — the real driver's virtual memory management (cuda_vmm): the VMM facts
// of get_device_info and the vmm_* calls (cuMemAddressReserve/Free, cuMemCreate/Release,
// cuMemMap/Unmap, cuMemSetAccess) over the driver-API entry points resolved at run time
// (driver_api(), cuda_driver.hpp). cuda_driver's vmm_* calls delegate here.
#pragma once

#include <cstddef>

#include "streampool/driver.hpp"

namespace streampool::driver_impl {

/// The driver-API half of cuda_driver. Stateless: every call reaches CUDA through driver_api()
/// and returns its reason when the driver API could not be resolved (Note [Resolving the driver
/// API] in cuda_vmm.cpp).
class cuda_vmm {
 public:
  /// VMM support and granularity of `device` (unsupported when the driver API is unusable).
  static void facts(int device, device_info* out) noexcept;
  static drv_result reserve(std::size_t bytes, std::size_t alignment, void** va) noexcept;
  static drv_result free(void* va, std::size_t bytes) noexcept;
  static drv_result create(int device, std::size_t bytes, vmm_handle_t* out) noexcept;
  static drv_result release(vmm_handle_t handle) noexcept;
  /// Note [Sharing VMM handles] (src/driver/driver_ipc_ops.cpp).
  static drv_result export_fd(vmm_handle_t handle, int* fd) noexcept;
  static drv_result import_fd(int fd, vmm_handle_t* out) noexcept;
  static drv_result retain(void* va, vmm_handle_t* out) noexcept;
  static drv_result map(void* va, std::size_t bytes, vmm_handle_t handle) noexcept;
  static drv_result set_access(void* va, std::size_t bytes, int device) noexcept;
  static drv_result unmap(void* va, std::size_t bytes) noexcept;
};

}  // namespace streampool::driver_impl
