// sim_contents.hpp (internal) — the simulated device's memory contents for checking mode: runs of
// equal bytes by address, written by memset_async / write_bytes and read by check_bytes /
// read_bytes (Note [Sim memory contents] in sim_contents.cpp). Knows nothing of who owns memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>

namespace streampool::sim {

/// What unmapped device memory reads as once mapped again, until written (Note [Sim memory contents]).
inline constexpr std::uint8_t unmapped_byte = 0xDD;

class contents_map {
 public:
  /// Sets [addr, addr + bytes) to `value`.
  void write(std::uintptr_t addr, std::size_t bytes, std::uint8_t value);
  /// The byte at `addr` (0 if never written).
  [[nodiscard]] std::uint8_t read(std::uintptr_t addr) const noexcept;
  /// Nothing was ever written (frees need not reset anything).
  [[nodiscard]] bool empty() const noexcept { return runs_.empty(); }
  /// Calls fn(offset, length, value) for the runs and unwritten gaps (value 0) covering
  /// [addr, addr + bytes), in address order.
  template <class Fn>
  void for_each_run(std::uintptr_t addr, std::size_t bytes, Fn&& fn) const {
    const std::uintptr_t end = addr + bytes;
    std::uintptr_t at = addr;
    auto it = runs_.upper_bound(addr);
    if (it != runs_.begin() && std::prev(it)->second.end > addr) --it;
    for (; it != runs_.end() && it->first < end; ++it) {
      if (it->first > at) fn(at - addr, it->first - at, std::uint8_t{0});
      const std::uintptr_t from = std::max(at, it->first);
      const std::uintptr_t to = std::min(end, it->second.end);
      fn(from - addr, to - from, it->second.value);
      at = to;
    }
    if (at < end) fn(at - addr, end - at, std::uint8_t{0});
  }

 private:
  /// A run of bytes that all hold `value`: [start, end), start being the key in runs_.
  struct byte_run {
    std::uintptr_t end = 0;
    std::uint8_t value = 0;
  };
  std::map<std::uintptr_t, byte_run> runs_;  ///< non-overlapping, neighbours of one value merged
};

}  // namespace streampool::sim
