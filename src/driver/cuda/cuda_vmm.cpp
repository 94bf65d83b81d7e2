// cuda_vmm.cpp — the real driver's driver-API half: resolving cu* entry points at run time with
// cudaGetDriverEntryPointByVersion (libcuda is never linked, so binaries start without an NVIDIA
// driver), and cuda_vmm: the VMM facts of get_device_info and the vmm_* calls
// (cuMemAddressReserve/Free, cuMemCreate/Release, cuMemMap/Unmap, cuMemSetAccess).
#include "driver/cuda/cuda_vmm.hpp"

#include <array>
#include <atomic>
#include <cstdint>

#include "driver/cuda/cuda_driver.hpp"

namespace streampool::driver_impl {
namespace {

// Note [Resolving the driver API]
// Each symbol is requested at the CUDA version whose ABI our function-pointer type matches (the
// `_vNNNN` suffix of its PFN_ typedef in cudaTypedefs.h), so a newer driver that adds a `_v2` of
// the function still hands us the one we know how to call. Resolution runs once per process (a
// function-local static) and also calls cuInit(0), which is idempotent. If anything fails, e.g.
// cudaErrorInsufficientDriver on a machine without a driver, `resolved` keeps the reason and
// every VMM call returns it; get_device_info then reports VMM as unsupported.
template <class Fn>
bool resolve(const char* symbol, unsigned int version, Fn& fn, drv_result& outcome) noexcept {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &address, version, cudaEnableDefault, &query);
  if (error != cudaSuccess) {
    outcome = runtime_result(error);
    return false;
  }
  if (query != cudaDriverEntryPointSuccess || address == nullptr) {
    outcome = {status::not_supported, static_cast<int>(cudaErrorSymbolNotFound)};
    return false;
  }
  fn = reinterpret_cast<Fn>(address);
  return true;
}

vmm_api resolve_all() noexcept {
  vmm_api api;
  drv_result outcome{};
  CUresult (*init)(unsigned int) = nullptr;
  const bool found =
      resolve("cuInit", 2000, init, outcome) &&
      resolve("cuGetErrorName", 6000, api.get_error_name, outcome) &&
      resolve("cuGetErrorString", 6000, api.get_error_string, outcome) &&
      resolve("cuDeviceGet", 2000, api.device_get, outcome) &&
      resolve("cuDeviceGetAttribute", 2000, api.device_get_attribute, outcome) &&
      resolve("cuMemAddressReserve", 10020, api.mem_address_reserve, outcome) &&
      resolve("cuMemAddressFree", 10020, api.mem_address_free, outcome) &&
      resolve("cuMemCreate", 10020, api.mem_create, outcome) &&
      resolve("cuMemRelease", 10020, api.mem_release, outcome) &&
      resolve("cuMemMap", 10020, api.mem_map, outcome) &&
      resolve("cuMemUnmap", 10020, api.mem_unmap, outcome) &&
      resolve("cuMemSetAccess", 10020, api.mem_set_access, outcome) &&
      resolve("cuMemGetAllocationGranularity", 10020, api.mem_get_allocation_granularity, outcome);
  if (found) {
    outcome = driver_api_result(init(0));
    drv_result optional{};  // Note [Sharing VMM handles]: without them, no IPC of VMM memory
    (void)resolve("cuMemExportToShareableHandle", 10020, api.mem_export_to_shareable_handle, optional);
    (void)resolve("cuMemImportFromShareableHandle", 10020, api.mem_import_from_shareable_handle, optional);
    (void)resolve("cuMemRetainAllocationHandle", 11000, api.mem_retain_allocation_handle, optional);
  }
  api.resolved = outcome;
  return api;
}

CUmemAllocationProp pinned_on(int device) noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

/// Whether `device` makes POSIX-fd-shareable cuMem handles: asked once per device (the attribute,
/// and the export/import entry points), and turned off for good when cuMemCreate refuses the
/// handle type (Note [Sharing VMM handles]). 0 unknown, 1 yes, -1 no.
std::array<std::atomic<signed char>, 128>& shareable_state() noexcept {
  static std::array<std::atomic<signed char>, 128> state{};
  return state;
}

bool ask_posix_fd_support(const vmm_api& api, int device) noexcept {
  if (api.mem_export_to_shareable_handle == nullptr || api.mem_import_from_shareable_handle == nullptr) return false;
  CUdevice handle = 0;
  int supported = 0;
  return api.device_get(&handle, device) == CUDA_SUCCESS &&
         api.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, handle) ==
             CUDA_SUCCESS &&
         supported != 0;
}

bool posix_fd_shareable(const vmm_api& api, int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= shareable_state().size()) return ask_posix_fd_support(api, device);
  std::atomic<signed char>& state = shareable_state()[static_cast<std::size_t>(device)];
  signed char known = state.load(std::memory_order_relaxed);
  if (known == 0) {
    known = ask_posix_fd_support(api, device) ? 1 : -1;
    state.store(known, std::memory_order_relaxed);
  }
  return known > 0;
}

void stop_sharing(int device) noexcept {
  if (device >= 0 && static_cast<std::size_t>(device) < shareable_state().size()) {
    shareable_state()[static_cast<std::size_t>(device)].store(-1, std::memory_order_relaxed);
  }
}

CUdeviceptr address_of(void* va) noexcept { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(va)); }

}  // namespace

const vmm_api& driver_api() noexcept {
  static const vmm_api api = resolve_all();
  return api;
}

void cuda_vmm::facts(int device, device_info* out) noexcept {
  out->vmm_supported = false;
  out->vmm_granularity = 0;
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return;
  }
  CUdevice handle = 0;
  int supported = 0;
  if (api.device_get(&handle, device) != CUDA_SUCCESS ||
      api.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, handle) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return;
  }
  const CUmemAllocationProp prop = pinned_on(device);
  std::size_t granularity = 0;
  if (api.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      granularity == 0) {
    return;
  }
  out->vmm_supported = true;
  out->vmm_granularity = granularity;
  out->vmm_ipc_supported = posix_fd_shareable(api, device);
}

drv_result cuda_vmm::reserve(std::size_t bytes, std::size_t alignment, void** va) noexcept {
  *va = nullptr;
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  CUdeviceptr address = 0;
  const drv_result result = driver_api_result(api.mem_address_reserve(&address, bytes, alignment, 0, 0));
  if (result.ok()) {
    *va = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
  }
  return result;
}

drv_result cuda_vmm::free(void* va, std::size_t bytes) noexcept {
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  return driver_api_result(api.mem_address_free(address_of(va), bytes));
}

drv_result cuda_vmm::create(int device, std::size_t bytes, vmm_handle_t* out) noexcept {
  *out = 0;
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  CUmemAllocationProp prop = pinned_on(device);
  CUmemGenericAllocationHandle handle = 0;
  CUresult created = CUDA_ERROR_UNKNOWN;
  if (posix_fd_shareable(api, device)) {  // Note [Sharing VMM handles]
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    created = api.mem_create(&handle, bytes, &prop, 0);
    if (created == CUDA_ERROR_NOT_PERMITTED || created == CUDA_ERROR_NOT_SUPPORTED) {
      stop_sharing(device);  // as PyTorch: plain handles from now on
      prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
      created = api.mem_create(&handle, bytes, &prop, 0);
    }
  } else {
    created = api.mem_create(&handle, bytes, &prop, 0);
  }
  const drv_result result = driver_api_result(created);
  if (result.ok()) {
    *out = static_cast<vmm_handle_t>(handle);
  }
  return result;
}

drv_result cuda_vmm::export_fd(vmm_handle_t handle, int* fd) noexcept {
  *fd = -1;
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  if (api.mem_export_to_shareable_handle == nullptr) {
    return {status::not_supported, static_cast<int>(CUDA_ERROR_NOT_SUPPORTED)};
  }
  int out = -1;
  const drv_result result = driver_api_result(api.mem_export_to_shareable_handle(
      &out, static_cast<CUmemGenericAllocationHandle>(handle), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (result.ok()) {
    *fd = out;
  }
  return result;
}

drv_result cuda_vmm::import_fd(int fd, vmm_handle_t* out) noexcept {
  *out = 0;
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  if (api.mem_import_from_shareable_handle == nullptr) {
    return {status::not_supported, static_cast<int>(CUDA_ERROR_NOT_SUPPORTED)};
  }
  CUmemGenericAllocationHandle handle = 0;
  // The fd travels in the pointer argument, as the CUDA documentation says for POSIX handles.
  const drv_result result = driver_api_result(api.mem_import_from_shareable_handle(
      &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  if (result.ok()) {
    *out = static_cast<vmm_handle_t>(handle);
  }
  return result;
}

drv_result cuda_vmm::retain(void* va, vmm_handle_t* out) noexcept {
  *out = 0;
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  if (api.mem_retain_allocation_handle == nullptr) {
    return {status::not_supported, static_cast<int>(CUDA_ERROR_NOT_SUPPORTED)};
  }
  CUmemGenericAllocationHandle handle = 0;
  const drv_result result = driver_api_result(api.mem_retain_allocation_handle(&handle, va));
  if (result.ok()) {
    *out = static_cast<vmm_handle_t>(handle);
  }
  return result;
}

drv_result cuda_vmm::release(vmm_handle_t handle) noexcept {
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  return driver_api_result(api.mem_release(static_cast<CUmemGenericAllocationHandle>(handle)));
}

drv_result cuda_vmm::map(void* va, std::size_t bytes, vmm_handle_t handle) noexcept {
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  return driver_api_result(api.mem_map(address_of(va), bytes, 0, static_cast<CUmemGenericAllocationHandle>(handle), 0));
}

drv_result cuda_vmm::set_access(void* va, std::size_t bytes, int device) noexcept {
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return driver_api_result(api.mem_set_access(address_of(va), bytes, &desc, 1));
}

drv_result cuda_vmm::unmap(void* va, std::size_t bytes) noexcept {
  const vmm_api& api = driver_api();
  if (!api.resolved.ok()) {
    return api.resolved;
  }
  return driver_api_result(api.mem_unmap(address_of(va), bytes));
}

}  // namespace streampool::driver_impl
