// sim_mallocs.cpp — the simulated device's cudaMalloc'd memory (malloc_heap): alignment and
// charging as the real driver does, addresses from each device's malloc_space.
#include "driver/sim/sim_mallocs.hpp"

namespace streampool::sim {

malloc_heap::malloc_heap(int device_count, sim_addresses mode) : bytes_(static_cast<std::size_t>(device_count), 0) {
  for (int device = 0; device < device_count; ++device) {
    const std::uintptr_t base = std::uintptr_t(device + 1) << device_space_shift;  // Note [Sim address spaces]
    spaces_.push_back(std::make_unique<malloc_space>(base, base + part_size, mode));
  }
}

// Note [Sim malloc accounting]
// Like cudaMalloc, blocks below 2 MiB are 512 B aligned and larger ones 2 MiB aligned, and the
// device is charged the size rounded up to that alignment (a 3 MiB cudaMalloc occupies two
// 2 MiB pages of physical memory). Zero bytes succeed with nullptr, as cudaMalloc does.
drv_result malloc_heap::allocate(int device, std::size_t bytes, std::size_t capacity, std::size_t available,
                                 void** out) {
  const std::size_t alignment = bytes >= large_malloc_threshold ? large_malloc_threshold : malloc_alignment;
  if (bytes > capacity || round_up(bytes, alignment) > available) {
    return out_of_memory(device);
  }
  const std::size_t size = round_up(bytes, alignment);
  const std::uintptr_t address = spaces_[static_cast<std::size_t>(device)]->allocate(size, alignment);
  if (address == 0) {
    return fail(status::other, reason_address_space);
  }
  ranges_.emplace(address, range_rec{device, size});
  bytes_[static_cast<std::size_t>(device)] += size;
  *out = reinterpret_cast<void*>(address);
  return {};
}

const malloc_heap::range_rec* malloc_heap::find(std::uintptr_t addr) const noexcept {
  const auto found = ranges_.find(addr);
  return found == ranges_.end() ? nullptr : &found->second;
}

void malloc_heap::release(std::uintptr_t addr) {
  const auto found = ranges_.find(addr);
  const auto device = static_cast<std::size_t>(found->second.device);
  bytes_[device] -= found->second.size;
  spaces_[device]->release(addr, found->second.size);
  ranges_.erase(found);
}

int malloc_heap::device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept {
  const std::uintptr_t end = addr + bytes;
  for (const auto& [base, rec] : ranges_) {
    if (addr >= base && end <= base + rec.size) return rec.device;
  }
  return -1;
}

}  // namespace streampool::sim
