// sim_memory_calls.cpp — the simulated device's memory calls (memory_calls): capacity queries,
// cudaMalloc / cudaFree (synchronising, retiring the range's hazards and contents), the vmm_*
// calls and the host calls that touch streams (host_free, memcpy_async). Note [Sim malloc
// accounting] (sim_mallocs.cpp), Note [Sim VMM rules] (sim_vmm.cpp) and Note [Sim pinned host
// memory] (sim_host.cpp) give the models.
#include "driver/sim/sim_memory_calls.hpp"

#include <cstring>

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
    // Note [Sim memory contents]: what the range held is gone; memory mapped there later reads
    // unmapped_byte until written (a pool that slept with discard shows it).
    if (!device_.contents_.empty()) device_.contents_.write(reinterpret_cast<std::uintptr_t>(va), bytes, unmapped_byte);
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

// Note [Sim copies]
// memcpy_async between host memory and device memory moves bytes through the contents model (Note
// [Sim memory contents]): a copy to the host writes the device range's runs into the host bytes, a
// copy to the device writes the host bytes as one run or one literal run (Note [Sim literal
// runs]), at submission like memset_async. Its device side is a use by the copy's stream, checked
// by the hazard checker as a kernel's would be (Note [Sim hazard checker]), so a copy racing an
// unmap, or a stream reading memory a copy on another stream is still filling, is reported.
// Host-to-host and device-to-device copies move nothing.
drv_result memory_calls::memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) return fail(status::invalid_value);
  if (bytes == 0) return drv_result{};
  if (dst == nullptr || src == nullptr) return fail(status::invalid_value);
  const auto to = reinterpret_cast<std::uintptr_t>(dst);
  const auto from = reinterpret_cast<std::uintptr_t>(src);
  const bool to_device = device_.device_of_range(to, bytes) >= 0;
  const bool from_device = device_.device_of_range(from, bytes) >= 0;
  const std::uint64_t item = device_.streams_.submit(index);
  if (to_device == from_device) return drv_result{};
  const std::uintptr_t device_side = to_device ? to : from;
  if (from_device) {
    auto* host = static_cast<unsigned char*>(dst);
    device_.contents_.for_each_run(from, bytes, [&](std::size_t offset, std::size_t length, std::uint8_t value,
                                                    const std::uint8_t* literal) {
      if (literal != nullptr) {
        std::memcpy(host + offset, literal, length);
      } else {
        std::memset(host + offset, value, length);
      }
    });
  } else {
    device_.contents_.write(to, static_cast<const std::uint8_t*>(src), bytes);  // Note [Sim literal runs]
  }
  (void)device_.hazards_.use(device_.streams_.records(), index, item, device_side, bytes);
  device_.vmm_.for_each_physical(device_side, bytes, [&](std::uintptr_t physical, std::size_t length, std::uintptr_t via) {
    (void)device_.physical_hazards_.use(device_.streams_.records(), index, item, physical, length, via);
  });  // Note [Sim aliased mappings]
  return drv_result{};
}

}  // namespace streampool::sim
