// sim_mallocs.hpp (internal) — the simulated device's cudaMalloc'd memory (malloc_heap): each
// device's allocations, placed by its malloc_space, and the bytes they are charged
// (Note [Sim malloc accounting] in sim_mallocs.cpp). Capture rules, synchronisation and contents
// are memory_calls' (malloc / free, sim_memory_calls.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "driver/sim/sim_common.hpp"
#include "driver/sim/sim_malloc_space.hpp"

namespace streampool::sim {

class malloc_heap {
 public:
  struct range_rec {
    int device = 0;
    std::size_t size = 0;  ///< accounted bytes
  };

  malloc_heap(int device_count, sim_addresses mode);

  /// Allocates `bytes` (> 0) on `device` into *out, if they fit `capacity` and `available`.
  [[nodiscard]] drv_result allocate(int device, std::size_t bytes, std::size_t capacity, std::size_t available,
                                    void** out);
  /// The allocation starting exactly at `addr`, or nullptr.
  [[nodiscard]] const range_rec* find(std::uintptr_t addr) const noexcept;
  /// Gives back the allocation find(addr) returned.
  void release(std::uintptr_t addr);
  /// Bytes charged to `device`.
  [[nodiscard]] std::size_t bytes(int device) const noexcept { return bytes_[static_cast<std::size_t>(device)]; }
  /// The device whose allocation holds all of [addr, addr + bytes), or -1.
  [[nodiscard]] int device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept;

 private:
  std::vector<std::unique_ptr<malloc_space>> spaces_;  ///< per device: where allocations go
  std::vector<std::size_t> bytes_;                     ///< per device
  std::unordered_map<std::uintptr_t, range_rec> ranges_;
};

}  // namespace streampool::sim
