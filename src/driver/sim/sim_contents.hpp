// sim_contents.hpp (internal) — the simulated device's memory contents for checking mode: runs of
// equal bytes, and literal runs that hold copied bytes, by address; written by memset_async,
// write_bytes and host-to-device copies, read by check_bytes, read_bytes and device-to-host
// copies (Note [Sim memory contents] in sim_contents.cpp). Knows nothing of who owns memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <vector>

namespace streampool::sim {

/// What unmapped device memory reads as once mapped again, until written (Note [Sim memory contents]).
inline constexpr std::uint8_t unmapped_byte = 0xDD;

class contents_map {
 public:
  /// Sets [addr, addr + bytes) to `value`.
  void write(std::uintptr_t addr, std::size_t bytes, std::uint8_t value);
  /// Sets [addr, addr + bytes) to the bytes at `data`: one run when they are all equal, else
  /// one literal run holding a copy of them (Note [Sim literal runs]).
  void write(std::uintptr_t addr, const std::uint8_t* data, std::size_t bytes);
  /// The byte at `addr` (0 if never written).
  [[nodiscard]] std::uint8_t read(std::uintptr_t addr) const noexcept;
  /// Nothing was ever written (frees need not reset anything).
  [[nodiscard]] bool empty() const noexcept { return runs_.empty(); }
  /// How many runs the map holds (a test sees that copies do not split memory byte by byte).
  [[nodiscard]] std::size_t run_count() const noexcept { return runs_.size(); }
  /// Calls fn(offset, length, value, literal) for the runs and unwritten gaps covering
  /// [addr, addr + bytes), in address order: `literal` is null for a run of `value` (0 for a
  /// gap), else it points at the `length` bytes the range holds.
  template <class Fn>
  void for_each_run(std::uintptr_t addr, std::size_t bytes, Fn&& fn) const {
    const std::uintptr_t end = addr + bytes;
    std::uintptr_t at = addr;
    auto it = runs_.upper_bound(addr);
    if (it != runs_.begin() && std::prev(it)->second.end > addr) --it;
    for (; it != runs_.end() && it->first < end; ++it) {
      if (it->first > at) fn(at - addr, it->first - at, std::uint8_t{0}, static_cast<const std::uint8_t*>(nullptr));
      const std::uintptr_t from = std::max(at, it->first);
      const std::uintptr_t to = std::min(end, it->second.end);
      const std::uint8_t* literal = it->second.literal_at(it->first, from);
      fn(from - addr, to - from, it->second.value, literal);
      at = to;
    }
    if (at < end) fn(at - addr, end - at, std::uint8_t{0}, static_cast<const std::uint8_t*>(nullptr));
  }

 private:
  /// [start, end), start being the key in runs_: every byte holds `value`, or, when `data` is
  /// set, the byte at start + i is (*data)[offset + i].
  struct byte_run {
    std::uintptr_t end = 0;
    std::uint8_t value = 0;
    std::shared_ptr<const std::vector<std::uint8_t>> data;
    std::size_t offset = 0;

    [[nodiscard]] const std::uint8_t* literal_at(std::uintptr_t start, std::uintptr_t addr) const noexcept {
      return data ? data->data() + offset + (addr - start) : nullptr;
    }
    /// The part of this run (which starts at `start`) from `from` on.
    [[nodiscard]] byte_run tail_from(std::uintptr_t start, std::uintptr_t from) const {
      byte_run tail = *this;
      if (data) tail.offset += from - start;
      return tail;
    }
  };
  /// Removes [addr, end) from the map, trimming runs that reach into it.
  void clear(std::uintptr_t addr, std::uintptr_t end);
  /// Places `run` at `addr` (the range must be clear), merging neighbouring runs of its value.
  void place(std::uintptr_t addr, byte_run run);

  std::map<std::uintptr_t, byte_run> runs_;  ///< non-overlapping, neighbouring equal-value runs merged
};

}  // namespace streampool::sim
