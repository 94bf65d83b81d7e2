// cuda_driver.hpp (internal) — the real driver: `driver` over the CUDA runtime API, plus the
// driver-API entry points for VMM, resolved at run time (never linked). cuda_driver.cpp holds the
// runtime calls; the VMM calls are cuda_vmm's (cuda_vmm.*), the capture and graph calls
// cuda_graphs' (cuda_graphs.*), and cuda_driver delegates to them. Nothing outside src/driver
// includes this; the rest of the project gets an instance from make_cuda_driver().
#pragma once

#include <cuda.h>  // driver-API types only: the functions are reached through vmm_api
#include <cuda_runtime_api.h>

#include <string>

#include "driver/cuda/cuda_graphs.hpp"
#include "driver/cuda/cuda_vmm.hpp"
#include "streampool/driver.hpp"

namespace streampool::driver_impl {

/// Native codes of driver-API (CUresult) failures are tagged with this offset so that describe()
/// can tell them from cudaError_t values, which reuse the same numbers (see Note [Native codes]).
inline constexpr int cu_result_tag = 100000;

[[nodiscard]] status status_of(cudaError_t error) noexcept;
[[nodiscard]] status status_of(CUresult result) noexcept;

/// drv_result for a runtime call; a failed call's error is cleared from the thread's last error.
[[nodiscard]] drv_result runtime_result(cudaError_t error) noexcept;
/// drv_result for a driver-API call (native = cu_result_tag + result).
[[nodiscard]] inline drv_result driver_api_result(CUresult result) noexcept {
  if (result == CUDA_SUCCESS) {
    return {};
  }
  return {status_of(result), cu_result_tag + static_cast<int>(result)};
}

/// The driver-API functions streampool uses, resolved once per process with
/// cudaGetDriverEntryPointByVersion.
struct vmm_api {
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*mem_address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*mem_address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                         unsigned long long) = nullptr;
  CUresult (*mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*mem_get_allocation_granularity)(size_t*, const CUmemAllocationProp*,
                                             CUmemAllocationGranularity_flags) = nullptr;
  /// Optional (Note [Sharing VMM handles]): nullptr when the driver lacks them.
  CUresult (*mem_export_to_shareable_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                             unsigned long long) = nullptr;
  CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
  CUresult (*mem_retain_allocation_handle)(CUmemGenericAllocationHandle*, void*) = nullptr;
  /// Outcome of the resolution: ok, or why the driver API is unusable (no driver, old driver).
  drv_result resolved{};
};

/// The process-wide driver API table, resolved on first use (thread-safe); check `.resolved`.
[[nodiscard]] const vmm_api& driver_api() noexcept;

class cuda_driver final : public driver {
 public:
  cuda_driver() = default;

  [[nodiscard]] std::string_view name() const noexcept override { return "cuda"; }
  [[nodiscard]] std::string describe(drv_result result) const override;
  drv_result device_count(int* count) noexcept override;
  drv_result get_device(int* device) noexcept override;
  drv_result set_device(int device) noexcept override;
  drv_result get_device_info(int device, device_info* out) noexcept override;
  drv_result mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept override;
  drv_result malloc(int device, std::size_t bytes, void** out) noexcept override;
  drv_result free(int device, void* ptr) noexcept override;
  drv_result stream_create(int device, stream_t* out) noexcept override;
  drv_result stream_destroy(int device, stream_t stream) noexcept override;
  drv_result stream_synchronize(int device, stream_t stream) noexcept override;
  drv_result stream_wait_event(stream_t stream, event_t event) noexcept override;
  drv_result stream_capture_info(stream_t stream, capture_info* out) noexcept override;
  drv_result stream_get_device(stream_t stream, int* device) noexcept override;
  drv_result device_synchronize(int device) noexcept override;
  drv_result event_create(int device, event_t* out) noexcept override;
  drv_result event_destroy(int device, event_t event) noexcept override;
  drv_result event_record(event_t event, stream_t stream) noexcept override;
  drv_result event_query(event_t event) noexcept override;
  drv_result event_synchronize(event_t event) noexcept override;
  drv_result pool_get_default(int device, mempool_t* out) noexcept override;
  drv_result pool_create(int device, mempool_t* out) noexcept override;
  drv_result pool_destroy(mempool_t pool) noexcept override;
  drv_result pool_set_attr(mempool_t pool, pool_attr attr, std::uint64_t value) noexcept override;
  drv_result pool_get_attr(mempool_t pool, pool_attr attr, std::uint64_t* value) noexcept override;
  drv_result pool_set_access(mempool_t pool, int peer_device, bool enable) noexcept override;
  drv_result malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out) noexcept override;
  drv_result free_async(void* ptr, stream_t stream) noexcept override;
  drv_result pool_trim_to(mempool_t pool, std::size_t keep_bytes) noexcept override;
  // VMM: cuda_vmm (cuda_vmm.cpp). The reservation is not tied to a device.
  drv_result vmm_reserve(int /*device*/, std::size_t bytes, std::size_t alignment, void** va) noexcept override {
    return cuda_vmm::reserve(bytes, alignment, va);
  }
  drv_result vmm_free(void* va, std::size_t bytes) noexcept override { return cuda_vmm::free(va, bytes); }
  drv_result vmm_create(int device, std::size_t bytes, vmm_handle_t* out) noexcept override {
    return cuda_vmm::create(device, bytes, out);
  }
  drv_result vmm_release(vmm_handle_t handle) noexcept override { return cuda_vmm::release(handle); }
  drv_result vmm_map(void* va, std::size_t bytes, vmm_handle_t handle) noexcept override {
    return cuda_vmm::map(va, bytes, handle);
  }
  drv_result vmm_set_access(void* va, std::size_t bytes, int device) noexcept override {
    return cuda_vmm::set_access(va, bytes, device);
  }
  drv_result vmm_unmap(void* va, std::size_t bytes) noexcept override { return cuda_vmm::unmap(va, bytes); }
  drv_result vmm_export_fd(vmm_handle_t handle, int* fd) noexcept override { return cuda_vmm::export_fd(handle, fd); }
  drv_result vmm_import_fd(int fd, vmm_handle_t* out) noexcept override { return cuda_vmm::import_fd(fd, out); }
  drv_result vmm_retain(void* va, vmm_handle_t* out) noexcept override { return cuda_vmm::retain(va, out); }
  // Capture and graphs: cuda_graphs (cuda_graphs.cpp).
  drv_result stream_begin_capture(stream_t stream, capture_mode mode) noexcept override {
    return cuda_graphs::begin_capture(stream, mode);
  }
  drv_result stream_end_capture(stream_t stream, graph_t* out) noexcept override {
    return cuda_graphs::end_capture(stream, out);
  }
  drv_result graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept override {
    return cuda_graphs::instantiate(*this, graph, out, flags);
  }
  drv_result graph_launch(graph_exec_t exec, stream_t stream) noexcept override {
    return cuda_graphs::launch(exec, stream);
  }
  drv_result graph_exec_destroy(graph_exec_t exec) noexcept override { return cuda_graphs::exec_destroy(*this, exec); }
  drv_result graph_destroy(graph_t graph) noexcept override { return cuda_graphs::destroy(*this, graph); }
  drv_result graph_mem_trim(int device) noexcept override { return cuda_graphs::mem_trim(*this, device); }
  drv_result thread_exchange_capture_mode(capture_mode* mode) noexcept override {
    return cuda_graphs::exchange_capture_mode(mode);
  }
  drv_result capture_on_graph_release(stream_t stream, void (*on_release)(void*), void* arg) noexcept override {
    return cuda_graphs::on_graph_release(*this, stream, on_release, arg);
  }
  drv_result capture_dependencies(stream_t stream, std::vector<graph_node_t>* out) noexcept override {
    return cuda_graphs::capture_dependencies(stream, out);
  }
  drv_result graph_node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) noexcept override {
    return cuda_graphs::node_dependencies(node, out);
  }
  // cuda_check_ops.cpp (checking mode)
  drv_result memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                          stream_t stream) noexcept override;
  drv_result check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                         stream_t stream, byte_check* out) noexcept override;
  // cuda_host.cpp (pinned host memory)
  drv_result host_alloc(std::size_t bytes, void** out) noexcept override;
  drv_result host_free(void* ptr) noexcept override;
  drv_result host_register(void* ptr, std::size_t bytes) noexcept override;
  drv_result host_unregister(void* ptr) noexcept override;
  drv_result memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) noexcept override;
};

}  // namespace streampool::driver_impl
