// size_rounding.hpp — the sizing rules of the native backend: request rounding (docs/pytorch-compatibility.md §2.4), pool
// choice and new-segment size (docs/pytorch-compatibility.md §2.5), split rules (docs/pytorch-compatibility.md §2.7) and the oversize reuse rules of
// the free-block search (docs/pytorch-compatibility.md §2.6). A `size_policy` is a read-only copy of the config values the
// hot path needs, built once per allocator.
#pragma once

#include <array>
#include <cstddef>

#include "streampool/config.hpp"

namespace streampool::native {

inline constexpr std::size_t min_block_size = 512;        ///< kMinBlockSize
inline constexpr std::size_t small_size = 1 * mib;        ///< kSmallSize: <= this → small pool
inline constexpr std::size_t small_buffer = 2 * mib;      ///< kSmallBuffer: small-pool segment
inline constexpr std::size_t min_large_alloc = 10 * mib;  ///< kMinLargeAlloc
inline constexpr std::size_t round_large = 2 * mib;       ///< kRoundLarge

class size_policy {
 public:
  explicit size_policy(const allocator_config& config);

  /// round_size (docs/pytorch-compatibility.md §2.4): 512-byte floor and multiple, power-of-two divisions when configured
  /// (guard: size > 512·D), skipped for requests above roundup_bypass_threshold.
  [[nodiscard]] std::size_t round_size(std::size_t bytes) const noexcept {
    // Inline for the hot path: without roundup_power2_divisions it is the 512-byte rule alone.
    if (!any_divisions_) [[likely]] return bytes < min_block_size ? min_block_size : round_up_512(bytes);
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
    return rounded < max_split_size_ && remaining > small_size;
  }
  /// Oversize reuse rules (docs/pytorch-compatibility.md §2.6): may a free large block of `candidate` bytes serve `rounded`?
  [[nodiscard]] bool may_reuse(std::size_t candidate, std::size_t rounded) const noexcept;
  /// True for blocks and segments counted by the oversize_* statistics.
  [[nodiscard]] bool is_oversize(std::size_t bytes) const noexcept { return bytes >= max_split_size_; }

  [[nodiscard]] std::size_t max_split_size() const noexcept { return max_split_size_; }
  [[nodiscard]] bool max_split_set() const noexcept { return max_split_size_ != allocator_config::unlimited; }

  /// The power-of-two-division step rounding on its own (exposed for tests).
  [[nodiscard]] static std::size_t roundup_power2_division(std::size_t bytes, std::size_t divisions) noexcept;

 private:
  static constexpr std::size_t round_up_512(std::size_t bytes) noexcept {
    return (bytes + min_block_size - 1) / min_block_size * min_block_size;
  }
  /// round_size when some interval has roundup_power2_divisions.
  [[nodiscard]] std::size_t round_size_divisions(std::size_t bytes) const noexcept;

  const allocator_config* config_;  // for divisions_for(); the allocator owns the config
  bool any_divisions_ = false;
  std::size_t max_split_size_;
  std::size_t max_non_split_rounding_;
  std::size_t roundup_bypass_threshold_;
  std::size_t large_segment_size_;
};

}  // namespace streampool::native
