// sim_host.hpp (internal) — the simulated device's pinned host memory (host_memory):
// host_alloc'd ranges (real heap memory, given back with the sim) and host_register'ed ranges by
// start address, held together against a capacity. See Note [Sim pinned host memory] in sim_host.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "driver/sim/sim_common.hpp"

namespace streampool::sim {

class host_memory {
 public:
  explicit host_memory(std::size_t capacity) noexcept : capacity_(capacity) {}
  host_memory(const host_memory&) = delete;
  host_memory& operator=(const host_memory&) = delete;
  ~host_memory();

  /// Page-aligned heap memory for `bytes` (> 0) in *out, or out_of_memory beyond the capacity.
  [[nodiscard]] drv_result alloc(std::size_t bytes, void** out);
  /// True when `ptr` is the start of a range alloc() handed out and not freed.
  [[nodiscard]] bool owns(const void* ptr) const { return allocs_.contains(reinterpret_cast<std::uintptr_t>(ptr)); }
  /// Gives back a range owns() accepts.
  void free(void* ptr);
  /// Registers [ptr, ptr + bytes): no overlap with a registered or allocated range, within capacity.
  [[nodiscard]] drv_result register_range(void* ptr, std::size_t bytes);
  [[nodiscard]] drv_result unregister_range(void* ptr);

  [[nodiscard]] std::size_t pinned() const noexcept { return pinned_; }
  [[nodiscard]] std::size_t allocs() const noexcept { return allocs_.size(); }
  [[nodiscard]] std::size_t registrations() const noexcept { return registered_.size(); }

 private:
  std::size_t capacity_;
  std::map<std::uintptr_t, std::size_t> allocs_;
  std::map<std::uintptr_t, std::size_t> registered_;
  std::size_t pinned_ = 0;  ///< bytes of both, held against capacity_
};

}  // namespace streampool::sim
