// sim_vmm.cpp — the simulated virtual memory management calls (what expandable segments use):
// address reservations that cost no memory, physical handles that do, and the map / set-access
// / unmap rules of the CUDA driver API, checked strictly so misuse shows up in CI.
#include <algorithm>

#include "driver/sim_state.hpp"

namespace streampool {

// Note [Sim VMM rules]
// Sizes and mapped addresses must be multiples of the device's granularity (options'
// vmm_granularity; the sim uses one granularity for all devices). A reservation is address
// space only and does not count toward capacity; vmm_create charges the device at once. A map
// covers one whole handle (the interface has no offset), inside one reservation, on unmapped
// pages. set_access needs the range fully mapped (it may span several mappings); unmap needs it
// to be exactly a run of whole mappings. Releasing a handle that is still mapped is allowed, as
// in CUDA: the memory goes when its last mapping does. vmm_free needs the exact reservation and
// no mappings left in it. Handles and addresses are never reused.
namespace {

using reservation_map = std::map<std::uintptr_t, sim::reservation_rec>;

/// The reservation containing [va, va + bytes), or end().
reservation_map::iterator find_reservation(reservation_map& reservations, std::uintptr_t va, std::size_t bytes) {
  auto found = reservations.upper_bound(va);
  if (found == reservations.begin()) {
    return reservations.end();
  }
  --found;
  const std::uintptr_t offset = va - found->first;
  if (offset >= found->second.size || bytes > found->second.size - offset) {
    return reservations.end();
  }
  return found;
}

using mapping_map = std::map<std::uintptr_t, sim::mapping_rec>;

/// The mapping containing `va`, or end().
mapping_map::iterator find_mapping(sim::reservation_rec& reservation, std::uintptr_t va) {
  auto found = reservation.mappings.upper_bound(va);
  if (found == reservation.mappings.begin()) {
    return reservation.mappings.end();
  }
  --found;
  return va - found->first < found->second.size ? found : reservation.mappings.end();
}

}  // namespace

drv_result sim_driver::vmm_reserve(int device, std::size_t bytes, std::size_t alignment, void** va) noexcept {
  return state_->run(counters_, driver_call::vmm_reserve, [&] {
    *va = nullptr;
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (!options_.vmm_supported) {
      return sim::fail(status::not_supported);
    }
    const std::size_t granularity = options_.vmm_granularity;
    if (bytes == 0 || bytes % granularity != 0 || (alignment & (alignment - 1)) != 0) {
      return sim::fail(status::invalid_value);
    }
    sim::device_rec& rec = state_->devices_[static_cast<std::size_t>(device)];
    const std::uintptr_t base = sim::bump(rec.vmm_next, rec.vmm_end, bytes, std::max(alignment, granularity));
    if (base == 0) {
      return sim::fail(status::other, sim::reason_address_space);
    }
    state_->reservations_.emplace(base, sim::reservation_rec{device, bytes, {}});
    *va = reinterpret_cast<void*>(base);
    return drv_result{};
  });
}

drv_result sim_driver::vmm_free(void* va, std::size_t bytes) noexcept {
  return state_->run(counters_, driver_call::vmm_free, [&] {
    const auto found = state_->reservations_.find(reinterpret_cast<std::uintptr_t>(va));
    if (found == state_->reservations_.end() || found->second.size != bytes || !found->second.mappings.empty()) {
      return sim::fail(status::invalid_value);
    }
    state_->reservations_.erase(found);
    return drv_result{};
  });
}

drv_result sim_driver::vmm_create(int device, std::size_t bytes, vmm_handle_t* out) noexcept {
  return state_->run(counters_, driver_call::vmm_create, [&] {
    *out = 0;
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (!options_.vmm_supported) {
      return sim::fail(status::not_supported);
    }
    if (bytes == 0 || bytes % options_.vmm_granularity != 0) {
      return sim::fail(status::invalid_value);
    }
    sim::device_rec& rec = state_->devices_[static_cast<std::size_t>(device)];
    if (bytes > options_.capacity - std::min(rec.in_use(), options_.capacity)) {
      return state_->out_of_memory(device);
    }
    const vmm_handle_t handle = state_->next_physical_++;
    state_->physicals_.emplace(handle, sim::physical_rec{device, bytes, false, 0});
    rec.vmm_bytes += bytes;
    *out = handle;
    return drv_result{};
  });
}

drv_result sim_driver::vmm_release(vmm_handle_t handle) noexcept {
  return state_->run(counters_, driver_call::vmm_release, [&] {
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    const auto found = state_->physicals_.find(handle);
    if (found == state_->physicals_.end() || found->second.released) {
      return sim::fail(status::invalid_value);
    }
    found->second.released = true;
    if (found->second.maps == 0) {
      state_->devices_[static_cast<std::size_t>(found->second.device)].vmm_bytes -= found->second.size;
      state_->physicals_.erase(found);
    }
    return drv_result{};
  });
}

drv_result sim_driver::vmm_map(void* va, std::size_t bytes, vmm_handle_t handle) noexcept {
  return state_->run(counters_, driver_call::vmm_map, [&] {
    const auto physical = state_->physicals_.find(handle);
    if (physical == state_->physicals_.end() || physical->second.released || physical->second.size < bytes) {
      return sim::fail(status::invalid_value);
    }
    if (physical->second.size != bytes) {
      return sim::fail(status::not_supported);  // what CUDA answers for part of a handle
    }
    const auto address = reinterpret_cast<std::uintptr_t>(va);
    const auto reservation = find_reservation(state_->reservations_, address, bytes);
    if (reservation == state_->reservations_.end() || (address - reservation->first) % options_.vmm_granularity != 0) {
      return sim::fail(status::invalid_value);
    }
    auto& mappings = reservation->second.mappings;
    const auto after = mappings.lower_bound(address);
    const bool overlaps_next = after != mappings.end() && after->first < address + bytes;
    const bool overlaps_prev =
        after != mappings.begin() && std::prev(after)->first + std::prev(after)->second.size > address;
    if (overlaps_next || overlaps_prev) {
      return sim::fail(status::invalid_value);
    }
    mappings.emplace_hint(after, address, sim::mapping_rec{bytes, handle, 0});
    ++physical->second.maps;
    return drv_result{};
  });
}

drv_result sim_driver::vmm_set_access(void* va, std::size_t bytes, int device) noexcept {
  return state_->run(counters_, driver_call::vmm_set_access, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    const auto address = reinterpret_cast<std::uintptr_t>(va);
    const auto reservation = bytes == 0 ? state_->reservations_.end()
                                        : find_reservation(state_->reservations_, address, bytes);
    if (reservation == state_->reservations_.end()) {
      return sim::fail(status::invalid_value);
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
      return sim::fail(status::invalid_value);
    }
    for (auto mapping = first; mapping != it; ++mapping) {
      mapping->second.access |= std::uint64_t{1} << device;
    }
    return drv_result{};
  });
}

drv_result sim_driver::vmm_unmap(void* va, std::size_t bytes) noexcept {
  return state_->run(counters_, driver_call::vmm_unmap, [&] {
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    const auto address = reinterpret_cast<std::uintptr_t>(va);
    const auto reservation = bytes == 0 ? state_->reservations_.end()
                                        : find_reservation(state_->reservations_, address, bytes);
    if (reservation == state_->reservations_.end()) {
      return sim::fail(status::invalid_value);
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
      return sim::fail(status::invalid_value);  // a gap, or a mapping cut in two
    }
    state_->hazards_.retire(state_->streams_, address, bytes, "vmm_unmap");  // Note [Sim hazard checker]
    for (auto mapping = first; mapping != last; ++mapping) {
      const auto physical = state_->physicals_.find(mapping->second.handle);
      if (--physical->second.maps == 0 && physical->second.released) {
        state_->devices_[static_cast<std::size_t>(physical->second.device)].vmm_bytes -= physical->second.size;
        state_->physicals_.erase(physical);
      }
    }
    mappings.erase(first, last);
    return drv_result{};
  });
}

}  // namespace streampool
