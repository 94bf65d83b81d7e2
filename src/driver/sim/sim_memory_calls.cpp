// sim_memory_calls.cpp — the simulated device's memory calls (memory_calls): capacity queries,
// cudaMalloc / cudaFree (synchronising, retiring the range's hazards and contents), the vmm_*
// calls and the host calls that touch streams (host_free, memcpy_async). Note [Sim malloc
// accounting] (sim_mallocs.cpp), Note [Sim VMM rules] (sim_vmm.cpp) and Note [Sim pinned host
// memory] (sim_host.cpp) give the models.
#include "driver/sim/sim_memory_calls.hpp"

namespace streampool::sim {

drv_result memory_calls::mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  *total_bytes = device_.options_.capacity;
  *free_bytes = device_.available(device);
  return drv_result{};
}

// Note [Sim malloc accounting] (sim_mallocs.cpp) gives the alignment and charging.
drv_result memory_calls::malloc(int device, std::size_t bytes, void** out) {
  *out = nullptr;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (device_.captures_.refuses_unsafe()) {  // Note [Relaxed uncaptured calls]
    return device_.captures_.refuse();
  }
  if (bytes == 0) {
    return drv_result{};
  }
  return device_.mallocs_.allocate(device, bytes, device_.options_.capacity, device_.available(device), out);
}

drv_result memory_calls::free(int device, void* ptr) {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  if (ptr == nullptr) {
    return drv_result{};
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  const malloc_heap::range_rec* found = device_.mallocs_.find(addr);
  if (found == nullptr || found->device != device) {
    return fail(status::invalid_value);
  }
  device_.streams_.complete_device(device);  // cudaFree synchronises the device
  device_.hazards_.retire(device_.streams_.records(), addr, found->size, "cudaFree");  // Note [Sim hazard checker]
  if (!device_.contents_.empty()) {
    device_.contents_.write(addr, found->size, 0);  // Note [Sim memory contents]
  }
  device_.mallocs_.release(addr);
  return drv_result{};
}

drv_result memory_calls::vmm_reserve(int device, std::size_t bytes, std::size_t alignment, void** va) {
  *va = nullptr;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (!device_.options_.vmm_supported) {
    return fail(status::not_supported);
  }
  return device_.vmm_.reserve(device, bytes, alignment, va);
}

drv_result memory_calls::vmm_create(int device, std::size_t bytes, vmm_handle_t* out) {
  *out = 0;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (!device_.options_.vmm_supported) {
    return fail(status::not_supported);
  }
  return device_.vmm_.create(device, bytes, device_.available(device), device_.options_.vmm_ipc_supported, out);
}

drv_result memory_calls::vmm_release(vmm_handle_t handle) {
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  return device_.vmm_.release(handle);
}

drv_result memory_calls::vmm_import_fd(int fd, vmm_handle_t* out) {
  *out = 0;
  if (!device_.options_.vmm_supported) {
    return fail(status::not_supported);
  }
  return device_.vmm_.import_fd(fd, out);
}

drv_result memory_calls::vmm_set_access(void* va, std::size_t bytes, int device) {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  return device_.vmm_.set_access(va, bytes, device);
}

drv_result memory_calls::vmm_unmap(void* va, std::size_t bytes) {
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  const drv_result result = device_.vmm_.unmap(va, bytes);
  if (result.ok()) {  // Note [Sim hazard checker]: the pages must be idle
    device_.hazards_.retire(device_.streams_.records(), reinterpret_cast<std::uintptr_t>(va), bytes, "vmm_unmap");
  }
  return result;
}

drv_result memory_calls::host_free(void* ptr) {
  if (ptr == nullptr) return drv_result{};
  if (device_.captures_.active() > 0) return device_.captures_.refuse();
  if (!device_.host_.owns(ptr)) return fail(status::invalid_value);
  device_.streams_.complete_all();  // cudaFreeHost synchronises
  device_.host_.free(ptr);
  return drv_result{};
}

drv_result memory_calls::memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) return fail(status::invalid_value);
  if (bytes == 0) return drv_result{};
  if (dst == nullptr || src == nullptr) return fail(status::invalid_value);
  device_.streams_.submit(index);
  return drv_result{};
}

}  // namespace streampool::sim
