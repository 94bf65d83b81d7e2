// size_rounding.hpp — the sizing rules of the native backend: request rounding (docs/pytorch-compatibility.md §2.4), pool
// choice and new-segment size (docs/pytorch-compatibility.md §2.5), split rules (docs/pytorch-compatibility.md §2.7) and the oversize reuse rules of
// the free-block search (docs/pytorch-compatibility.md §2.6). A `size_policy` is a copy of the config values the
// hot path needs, built once per allocator and changed by update() when settings change at run time
// (Note [Size rules changed at run time]).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "streampool/config.hpp"

namespace streampool::native {

inline constexpr std::size_t min_block_size = 512;        ///< kMinBlockSize
inline constexpr std::size_t small_size = 1 * mib;        ///< kSmallSize: <= this → small pool
inline constexpr std::size_t small_buffer = 2 * mib;      ///< kSmallBuffer: small-pool segment
inline constexpr std::size_t min_large_alloc = 10 * mib;  ///< kMinLargeAlloc
inline constexpr std::size_t round_large = 2 * mib;       ///< kRoundLarge

// Note [Size rules changed at run time]
// allocator::set_settings can change max_split_size_mb, max_non_split_rounding_mb,
// roundup_power2_divisions and roundup_bypass_threshold_mb while other threads allocate (Note
// [Settings changed at run time] in src/config/runtime_settings.cpp). The hot path reads these
// values without a lock, so each is a relaxed atomic (a plain load on x86-64 and AArch64: the
// cache-hit path costs the same). An allocation that races with update() may see some old and some
// new values; each value on its own is one of the two, and each block keeps the size it was given,
// as with PyTorch's allocator, which reads its config the same way. Each update() also bumps
// version(), so a decision taken under the rules can be kept until they change (the front
// block's take-back: Note [Front block rules] in front_block.hpp).
class size_policy {
 public:
  explicit size_policy(const allocator_config& config);
  size_policy(const size_policy&) = delete;
  size_policy& operator=(const size_policy&) = delete;
  /// Takes the size rules of `config` (Note [Size rules changed at run time]).
  void update(const allocator_config& config) noexcept;

  /// round_size (docs/pytorch-compatibility.md §2.4): 512-byte floor and multiple, power-of-two divisions when configured
  /// (guard: size > 512·D), skipped for requests above roundup_bypass_threshold.
  [[nodiscard]] std::size_t round_size(std::size_t bytes) const noexcept {
    // Inline for the hot path: without roundup_power2_divisions it is the 512-byte rule alone.
    if (!any_divisions_.load(std::memory_order_relaxed)) [[likely]] {
      return bytes < min_block_size ? min_block_size : round_up_512(bytes);
    }
    return round_size_divisions(bytes);
  }
  /// True when a rounded size goes to the small pool (docs/pytorch-compatibility.md §2.5).
  [[nodiscard]] static constexpr bool is_small(std::size_t rounded) noexcept { return rounded <= small_size; }
  /// get_allocation_size (docs/pytorch-compatibility.md §2.5): the size of a new segment for a rounded request.
  [[nodiscard]] std::size_t allocation_size(std::size_t rounded) const noexcept;
  /// should_split (docs/pytorch-compatibility.md §2.7) for a free block of `block_size` serving `rounded` bytes. `fine`: the
  /// block is in the small pool or in an expandable segment (split when >= 512 bytes remain).
  [[nodiscard]] bool should_split(bool fine, std::size_t block_size, std::size_t rounded) const noexcept {
    const std::size_t remaining = block_size - rounded;
    if (fine) return remaining >= min_block_size;
    return rounded < max_split_size() && remaining > small_size;
  }
  /// Oversize reuse rules (docs/pytorch-compatibility.md §2.6): may a free large block of `candidate` bytes serve `rounded`?
  [[nodiscard]] bool may_reuse(std::size_t candidate, std::size_t rounded) const noexcept {
    // Inline: the take-back of a large front block asks it (Note [Front block]).
    const std::size_t max_split = max_split_size();
    if (rounded < max_split && candidate >= max_split) return false;
    // candidate - rounded, not rounded + max_non_split_rounding_: the sum wraps for a saturating
    // max_non_split_rounding_mb ("unlimited"), which then reused no oversize block at all
    // (Note [Sizes in MiB] in src/config/key_parsers.cpp).
    return !(rounded >= max_split && candidate >= rounded &&
             candidate - rounded >= max_non_split_rounding_.load(std::memory_order_relaxed));
  }
  /// True for blocks and segments counted by the oversize_* statistics.
  [[nodiscard]] bool is_oversize(std::size_t bytes) const noexcept { return bytes >= max_split_size(); }

  [[nodiscard]] std::size_t max_split_size() const noexcept { return max_split_size_.load(std::memory_order_relaxed); }
  [[nodiscard]] bool max_split_set() const noexcept { return max_split_size() != allocator_config::unlimited; }
  /// Changes with every update() (never 0): Note [Size rules changed at run time].
  [[nodiscard]] std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }

  /// The power-of-two-division step rounding on its own (exposed for tests).
  [[nodiscard]] static std::size_t roundup_power2_division(std::size_t bytes, std::size_t divisions) noexcept;

 private:
  static constexpr std::size_t round_up_512(std::size_t bytes) noexcept {
    return (bytes + min_block_size - 1) / min_block_size * min_block_size;
  }
  /// round_size when some interval has roundup_power2_divisions.
  [[nodiscard]] std::size_t round_size_divisions(std::size_t bytes) const noexcept;

  /// allocator_config::divisions_for() over divisions_.
  [[nodiscard]] std::size_t divisions_for(std::size_t bytes) const noexcept;

  std::atomic<bool> any_divisions_{false};
  std::array<std::atomic<std::size_t>, allocator_config::roundup_intervals> divisions_{};
  std::atomic<std::size_t> max_split_size_{allocator_config::unlimited};
  std::atomic<std::size_t> max_non_split_rounding_{0};
  std::atomic<std::size_t> roundup_bypass_threshold_{allocator_config::unlimited};
  std::atomic<std::uint64_t> version_{0};
  const std::size_t large_segment_size_;  ///< not a runtime key
};

}  // namespace streampool::native
