// sim_malloc_space.hpp (internal) — where the simulated device puts cudaMalloc allocations: a
// model of the real driver's address assignment (Note [Sim address assignment] in
// sim_malloc_space.cpp), or plain increasing addresses (sim_addresses::bump). One per device;
// sim_driver::malloc/free call it under the sim's mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "streampool/sim_driver.hpp"

namespace streampool::sim {

class malloc_space {
 public:
  /// Manages the addresses [begin, end) (both multiples of 32 MiB, end - begin >= 1 GiB).
  malloc_space(std::uintptr_t begin, std::uintptr_t end, sim_addresses mode);

  /// An address for `bytes` aligned to `alignment` (a power of two >= 512 that divides 32 MiB;
  /// `bytes` a multiple of 512, > 0), or 0 when the range is exhausted. Throws std::bad_alloc.
  [[nodiscard]] std::uintptr_t allocate(std::size_t bytes, std::size_t alignment);
  /// Returns [address, address + bytes), which allocate() handed out and nothing released since.
  void release(std::uintptr_t address, std::size_t bytes);

 private:
  /// Free ranges of one chunk: start -> end, and (length, start) for best fit.
  struct chunk_rec {
    std::uintptr_t base = 0;
    std::uintptr_t end = 0;
    bool permanent = false;  ///< the context's reservation: never released
    std::map<std::uintptr_t, std::uintptr_t> free_by_start;
    std::set<std::pair<std::size_t, std::uintptr_t>> free_by_length;
  };
  using chunk_map = std::map<std::uint64_t, chunk_rec>;  ///< by creation order (birth)

  static void add_free(chunk_rec& chunk, std::uintptr_t start, std::uintptr_t end);
  static void remove_free(chunk_rec& chunk, std::uintptr_t start, std::uintptr_t end);
  /// The best-fitting aligned start inside `chunk`, or 0.
  static std::uintptr_t best_fit(const chunk_rec& chunk, std::size_t bytes, std::size_t alignment);
  /// Takes [address, address + bytes) out of the free range of `chunk` that holds it.
  static void take(chunk_rec& chunk, std::uintptr_t address, std::size_t bytes);
  /// A new chunk of `size` bytes at the top of the highest hole that is larger; 0 when none is.
  std::uintptr_t reserve_chunk(std::size_t size);
  void release_chunk(chunk_map::iterator chunk);

  sim_addresses mode_;
  std::uintptr_t bump_next_ = 0;  ///< sim_addresses::bump
  std::uintptr_t end_ = 0;
  std::uint64_t next_birth_ = 0;
  chunk_map chunks_;
  std::map<std::uintptr_t, std::uint64_t> chunk_at_;  ///< chunk base -> birth
  std::map<std::uintptr_t, std::uintptr_t> holes_;    ///< unreserved addresses: start -> end
};

}  // namespace streampool::sim
