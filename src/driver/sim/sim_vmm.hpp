// sim_vmm.hpp (internal) — the simulated device's virtual memory management (vmm_space): address
// reservations that cost no memory, physical handles that do (counted per device), mappings of
// whole handles into reservations, and access rights, checked by the rules of
// Note [Sim VMM rules] in sim_vmm.cpp. Device checks, capture refusal and the hazard checker are
// memory_calls' (sim_memory_calls.cpp).
#pragma once

#include <algorithm>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "driver/sim/sim_common.hpp"
#include "driver/sim/sim_ipc.hpp"

namespace streampool::sim {

class vmm_space {
 public:
  /// `device_count` devices, each with its VMM part of Note [Sim address spaces]; sizes and
  /// mapped addresses in multiples of `granularity`.
  vmm_space(int device_count, std::size_t granularity);

  [[nodiscard]] drv_result reserve(int device, std::size_t bytes, std::size_t alignment, void** va);
  [[nodiscard]] drv_result free(void* va, std::size_t bytes);
  /// A handle of `bytes` physical memory on `device`, if `available` bytes are free there;
  /// `shareable`: export_fd may export it.
  [[nodiscard]] drv_result create(int device, std::size_t bytes, std::size_t available, bool shareable,
                                  vmm_handle_t* out);
  /// Note [Sim IPC]: a descriptor naming the memory of `handle`, and a handle of the memory a
  /// descriptor names (of this vmm_space or another's).
  [[nodiscard]] drv_result export_fd(vmm_handle_t handle, int* fd);
  [[nodiscard]] drv_result import_fd(int fd, vmm_handle_t* out);
  /// The handle mapped at `va`, held once more (a release each).
  [[nodiscard]] drv_result retain(void* va, vmm_handle_t* out);
  [[nodiscard]] drv_result release(vmm_handle_t handle);
  [[nodiscard]] drv_result map(void* va, std::size_t bytes, vmm_handle_t handle);
  [[nodiscard]] drv_result set_access(void* va, std::size_t bytes, int device);
  [[nodiscard]] drv_result unmap(void* va, std::size_t bytes);

  /// Physical bytes held on `device` (created handles not yet released, or still mapped).
  [[nodiscard]] std::size_t bytes(int device) const noexcept { return devices_[static_cast<std::size_t>(device)].bytes; }
  /// The device whose mapped pages cover [addr, addr + bytes) without a gap, or -1.
  [[nodiscard]] int device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept;
  /// The physical memory behind the mapped VMM pages of [addr, addr + bytes), piece by piece:
  /// f(physical address, bytes, address of the mapping used). Physical addresses are the
  /// handle's id times 2^40 plus the offset (Note [Sim aliased mappings] in sim_hazards.cpp).
  template <class F>
  void for_each_physical(std::uintptr_t addr, std::size_t bytes, F&& f) const;

 private:
  struct mapping_rec {
    std::size_t size = 0;
    vmm_handle_t handle = 0;
    std::uint64_t access = 0;  ///< bitmask of devices with read-write access
  };
  using mapping_map = std::map<std::uintptr_t, mapping_rec>;
  struct reservation_rec {
    int device = 0;
    std::size_t size = 0;
    mapping_map mappings;
  };
  using reservation_map = std::map<std::uintptr_t, reservation_rec>;
  struct physical_rec {
    int device = 0;
    std::size_t size = 0;
    bool released = false;
    int maps = 0;
    int extra_holds = 0;  ///< retain()s not yet released
    bool shareable = false;
    bool imported = false;                  ///< charges nothing here (Note [Sim IPC])
    std::shared_ptr<shared_memory> shared;  ///< once exported or imported
  };
  struct device_part {
    std::uintptr_t next = 0, end = 0;  ///< unreserved addresses (bump, never reused)
    std::size_t bytes = 0;             ///< physical memory
  };

  /// The reservation containing [va, va + bytes), or end().
  reservation_map::iterator find_reservation(std::uintptr_t va, std::size_t bytes);
  /// The mapping containing `va`, or end().
  static mapping_map::iterator find_mapping(reservation_rec& reservation, std::uintptr_t va);
  /// Drops one mapping of `handle`; the memory goes with the last one of a released handle.
  void unmap_handle(vmm_handle_t handle);
  /// Forgets a released, unmapped handle (and uncharges its device unless imported).
  void erase_physical(std::unordered_map<vmm_handle_t, physical_rec>::iterator physical);

  std::size_t granularity_;
  std::vector<device_part> devices_;
  reservation_map reservations_;
  std::unordered_map<vmm_handle_t, physical_rec> physicals_;
  vmm_handle_t next_physical_ = 0x1000;
};

template <class F>
void vmm_space::for_each_physical(std::uintptr_t addr, std::size_t bytes, F&& f) const {
  const std::uintptr_t end = addr + bytes;
  auto reservation = reservations_.upper_bound(addr);
  if (reservation == reservations_.begin()) return;
  --reservation;
  const auto& mappings = reservation->second.mappings;
  auto mapping = mappings.upper_bound(addr);
  if (mapping != mappings.begin()) --mapping;
  for (; mapping != mappings.end() && mapping->first < end; ++mapping) {
    const std::uintptr_t lo = std::max(addr, mapping->first);
    const std::uintptr_t hi = std::min(end, mapping->first + mapping->second.size);
    if (lo >= hi) continue;
    f((std::uintptr_t{mapping->second.handle} << 40) + (lo - mapping->first), hi - lo, mapping->first);
  }
}

}  // namespace streampool::sim
