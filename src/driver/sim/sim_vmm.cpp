// sim_vmm.cpp — the simulated virtual memory management (vmm_space, what expandable segments
// use): address reservations that cost no memory, physical handles that do, and the map /
// set-access / unmap rules of the CUDA driver API, checked strictly so misuse shows up in CI.
// The vmm_* driver calls (memory_calls, sim_memory_calls.cpp) add device checks, capture refusal
// and the hazard check.
#include <algorithm>
#include <iterator>

#include "driver/sim/sim_vmm.hpp"

namespace streampool {

// Note [Sim VMM rules]
// Sizes and mapped addresses must be multiples of the device's granularity (options'
// vmm_granularity; the sim uses one granularity for all devices). A reservation is address
// space only and does not count toward capacity; vmm_create charges the device at once. A map
// covers one whole handle (the interface has no offset), inside one reservation, on unmapped
// pages. set_access needs the range fully mapped (it may span several mappings); unmap needs it
// to be exactly a run of whole mappings. Releasing a handle that is still mapped is allowed, as
// in CUDA: the memory goes when its last mapping does. vmm_retain holds the handle mapped at an
// address once more, as cuMemRetainAllocationHandle (each hold is one release). vmm_free needs the
// exact reservation and no mappings left in it. Handles and addresses are never reused.
namespace sim {

vmm_space::vmm_space(int device_count, std::size_t granularity) : granularity_(granularity) {
  devices_.resize(static_cast<std::size_t>(device_count));
  for (int device = 0; device < device_count; ++device) {
    const std::uintptr_t base = std::uintptr_t(device + 1) << device_space_shift;
    devices_[static_cast<std::size_t>(device)].next = base + 2 * part_size;
    devices_[static_cast<std::size_t>(device)].end = base + (std::uintptr_t{1} << device_space_shift);
  }
}

vmm_space::reservation_map::iterator vmm_space::find_reservation(std::uintptr_t va, std::size_t bytes) {
  auto found = reservations_.upper_bound(va);
  if (found == reservations_.begin()) {
    return reservations_.end();
  }
  --found;
  const std::uintptr_t offset = va - found->first;
  if (offset >= found->second.size || bytes > found->second.size - offset) {
    return reservations_.end();
  }
  return found;
}

vmm_space::mapping_map::iterator vmm_space::find_mapping(reservation_rec& reservation, std::uintptr_t va) {
  auto found = reservation.mappings.upper_bound(va);
  if (found == reservation.mappings.begin()) {
    return reservation.mappings.end();
  }
  --found;
  return va - found->first < found->second.size ? found : reservation.mappings.end();
}

drv_result vmm_space::reserve(int device, std::size_t bytes, std::size_t alignment, void** va) {
  if (bytes == 0 || bytes % granularity_ != 0 || (alignment & (alignment - 1)) != 0) {
    return fail(status::invalid_value);
  }
  device_part& part = devices_[static_cast<std::size_t>(device)];
  const std::uintptr_t base = bump(part.next, part.end, bytes, std::max(alignment, granularity_));
  if (base == 0) {
    return fail(status::other, reason_address_space);
  }
  reservations_.emplace(base, reservation_rec{device, bytes, {}});
  *va = reinterpret_cast<void*>(base);
  return {};
}

drv_result vmm_space::free(void* va, std::size_t bytes) {
  const auto found = reservations_.find(reinterpret_cast<std::uintptr_t>(va));
  if (found == reservations_.end() || found->second.size != bytes || !found->second.mappings.empty()) {
    return fail(status::invalid_value);
  }
  reservations_.erase(found);
  return {};
}

drv_result vmm_space::create(int device, std::size_t bytes, std::size_t available, bool shareable, vmm_handle_t* out) {
  if (bytes == 0 || bytes % granularity_ != 0) {
    return fail(status::invalid_value);
  }
  if (bytes > available) {
    return out_of_memory(device);
  }
  const vmm_handle_t handle = next_physical_++;
  physicals_.emplace(handle, physical_rec{device, bytes, false, 0, 0, shareable, false, nullptr});
  devices_[static_cast<std::size_t>(device)].bytes += bytes;
  *out = handle;
  return {};
}

void vmm_space::erase_physical(std::unordered_map<vmm_handle_t, physical_rec>::iterator physical) {
  if (!physical->second.imported) devices_[static_cast<std::size_t>(physical->second.device)].bytes -= physical->second.size;
  physicals_.erase(physical);  // drops this space's hold on shared memory (Note [Sim IPC])
}

drv_result vmm_space::export_fd(vmm_handle_t handle, int* fd) {
  *fd = -1;
  const auto found = physicals_.find(handle);
  if (found == physicals_.end() || found->second.released) {
    return fail(status::invalid_value);
  }
  if (!found->second.shareable) {
    return fail(status::not_supported);  // created without a shareable handle type
  }
  physical_rec& rec = found->second;
  if (rec.shared == nullptr) rec.shared = std::make_shared<shared_memory>(rec.device, rec.size);
  *fd = publish_shared_memory(rec.shared);
  return *fd < 0 ? fail(status::other, reason_host_exception) : drv_result{};
}

drv_result vmm_space::import_fd(int fd, vmm_handle_t* out) {
  *out = 0;
  std::shared_ptr<shared_memory> memory = find_shared_memory(fd);
  if (memory == nullptr || memory->device() < 0 || static_cast<std::size_t>(memory->device()) >= devices_.size()) {
    return fail(status::invalid_value);
  }
  const vmm_handle_t handle = next_physical_++;
  physicals_.emplace(handle, physical_rec{memory->device(), memory->size(), false, 0, 0, true, true, std::move(memory)});
  *out = handle;
  return {};
}

drv_result vmm_space::release(vmm_handle_t handle) {
  const auto found = physicals_.find(handle);
  if (found == physicals_.end() || found->second.released) {
    return fail(status::invalid_value);
  }
  if (found->second.extra_holds > 0) {  // a retain()'s release
    --found->second.extra_holds;
    return {};
  }
  found->second.released = true;
  if (found->second.maps == 0) erase_physical(found);
  return {};
}

drv_result vmm_space::retain(void* va, vmm_handle_t* out) {
  *out = 0;
  const auto address = reinterpret_cast<std::uintptr_t>(va);
  const auto reservation = find_reservation(address, 1);
  if (reservation == reservations_.end()) {
    return fail(status::invalid_value);
  }
  const auto mapping = find_mapping(reservation->second, address);
  if (mapping == reservation->second.mappings.end()) {
    return fail(status::invalid_value);  // nothing mapped there
  }
  physical_rec& rec = physicals_.at(mapping->second.handle);
  if (rec.released) {
    rec.released = false;  // held again by the caller: the mapping kept it alive
  } else {
    ++rec.extra_holds;
  }
  *out = mapping->second.handle;
  return {};
}

drv_result vmm_space::map(void* va, std::size_t bytes, vmm_handle_t handle) {
  const auto physical = physicals_.find(handle);
  if (physical == physicals_.end() || physical->second.released || physical->second.size < bytes) {
    return fail(status::invalid_value);
  }
  if (physical->second.size != bytes) {
    return fail(status::not_supported);  // what CUDA answers for part of a handle
  }
  const auto address = reinterpret_cast<std::uintptr_t>(va);
  const auto reservation = find_reservation(address, bytes);
  if (reservation == reservations_.end() || (address - reservation->first) % granularity_ != 0) {
    return fail(status::invalid_value);
  }
  auto& mappings = reservation->second.mappings;
  const auto after = mappings.lower_bound(address);
  const bool overlaps_next = after != mappings.end() && after->first < address + bytes;
  const bool overlaps_prev =
      after != mappings.begin() && std::prev(after)->first + std::prev(after)->second.size > address;
  if (overlaps_next || overlaps_prev) {
    return fail(status::invalid_value);
  }
  mappings.emplace_hint(after, address, mapping_rec{bytes, handle, 0});
  ++physical->second.maps;
  return {};
}

drv_result vmm_space::set_access(void* va, std::size_t bytes, int device) {
  const auto address = reinterpret_cast<std::uintptr_t>(va);
  const auto reservation = bytes == 0 ? reservations_.end() : find_reservation(address, bytes);
  if (reservation == reservations_.end()) {
    return fail(status::invalid_value);
  }
  // Check that the mappings cover the range without gaps before changing anything.
  const auto first = find_mapping(reservation->second, address);
  auto it = first;
  std::uintptr_t covered = address;
  while (it != reservation->second.mappings.end() && it->first <= covered && covered < address + bytes) {
    covered = it->first + it->second.size;
    ++it;
  }
  if (first == reservation->second.mappings.end() || covered < address + bytes) {
    return fail(status::invalid_value);
  }
  for (auto mapping = first; mapping != it; ++mapping) {
    mapping->second.access |= std::uint64_t{1} << device;
  }
  return {};
}

void vmm_space::unmap_handle(vmm_handle_t handle) {
  const auto physical = physicals_.find(handle);
  if (--physical->second.maps == 0 && physical->second.released) erase_physical(physical);
}

drv_result vmm_space::unmap(void* va, std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(va);
  const auto reservation = bytes == 0 ? reservations_.end() : find_reservation(address, bytes);
  if (reservation == reservations_.end()) {
    return fail(status::invalid_value);
  }
  auto& mappings = reservation->second.mappings;
  const auto first = mappings.find(address);  // must start exactly at a mapping
  auto last = first;
  std::uintptr_t covered = address;
  while (last != mappings.end() && last->first == covered && covered < address + bytes) {
    covered += last->second.size;
    ++last;
  }
  if (first == mappings.end() || covered != address + bytes) {
    return fail(status::invalid_value);  // a gap, or a mapping cut in two
  }
  for (auto mapping = first; mapping != last; ++mapping) {
    unmap_handle(mapping->second.handle);
  }
  mappings.erase(first, last);
  return {};
}

int vmm_space::device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept {
  const std::uintptr_t end = addr + bytes;
  auto reservation = reservations_.upper_bound(addr);
  if (reservation == reservations_.begin()) return -1;
  --reservation;
  const auto& mappings = reservation->second.mappings;
  auto mapping = mappings.upper_bound(addr);
  if (mapping == mappings.begin()) return -1;
  --mapping;
  // The mappings from here on must cover [addr, end) without a gap.
  std::uintptr_t covered = mapping->first;
  for (; mapping != mappings.end() && mapping->first == covered && covered < end; ++mapping) {
    covered += mapping->second.size;
  }
  return covered >= end && covered > addr ? reservation->second.device : -1;
}

}  // namespace sim

}  // namespace streampool
