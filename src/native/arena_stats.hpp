// arena_stats.hpp — the hot-path statistics of one stream arena (docs/pytorch-compatibility.md §2.14: allocation, active,
// inactive_split, allocated/active/inactive_split/requested bytes, oversize_allocations), kept per
// pool kind (small/large); "all" is their sum, except its peak, which the arena tracks too.
// Written only by the holder of the arena lock, read by stats() of any thread (relaxed atomics:
// plain loads and stores on x86). Device-wide peaks: Note [Device peaks] in device_state.hpp.
// Active and active_bytes are derived from allocation and allocated_bytes plus the frees still
// pending (Note [Derived active counters] in stream_arena.hpp): their slots hold the pending part.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "streampool/stats.hpp"

namespace streampool::native {

enum class arena_stat_kind : std::uint8_t {
  allocation, active, inactive_split, allocated_bytes, active_bytes, inactive_split_bytes, requested_bytes
};
inline constexpr std::size_t arena_stat_kinds = 7;
/// Index of a device peak: kind * 3 + stat_pool, and oversize_allocations last.
inline constexpr std::size_t oversize_allocations_index = arena_stat_kinds * stat_pool_count;
inline constexpr std::size_t arena_stat_count = oversize_allocations_index + 1;

[[nodiscard]] constexpr std::size_t stat_index(arena_stat_kind kind, stat_pool pool) noexcept {
  return static_cast<std::size_t>(kind) * stat_pool_count + static_cast<std::size_t>(pool);
}

/// One counter of one arena. Only `current` and `freed` change on the hot path: `allocated` is
/// derived (current + freed - offset), `offset` absorbs reset_accumulated.
struct arena_counter {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> freed{0};
  std::atomic<std::int64_t> offset{0};
  std::int64_t peak = 0;  ///< this arena's own high-water mark (arena lock)

  [[nodiscard]] std::int64_t now() const noexcept { return current.load(std::memory_order_relaxed); }
  /// Adds current, allocated and freed (not the peak) into `out`.
  void add_to(stat& out) const noexcept {
    const std::int64_t c = now();
    const std::int64_t f = freed.load(std::memory_order_relaxed);
    out.current += c;
    out.freed += f;
    out.allocated += c + f - offset.load(std::memory_order_relaxed);
  }
  void reset_accumulated() noexcept {
    offset.store(now(), std::memory_order_relaxed);
    freed.store(0, std::memory_order_relaxed);
  }
};

}  // namespace streampool::native
