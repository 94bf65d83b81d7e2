// size_rounding.cpp — see size_rounding.hpp.
#include "native/size_rounding.hpp"

#include <bit>

namespace streampool::native {

size_policy::size_policy(const allocator_config& config) : large_segment_size_(config.large_segment_size) {
  update(config);
}

void size_policy::update(const allocator_config& config) noexcept {
  // Note [Size rules changed at run time]
  constexpr auto relaxed = std::memory_order_relaxed;
  bool any = false;
  for (std::size_t i = 0; i < divisions_.size(); ++i) {
    divisions_[i].store(config.roundup_power2_divisions[i], relaxed);
    any = any || config.roundup_power2_divisions[i] > 1;
  }
  max_split_size_.store(config.max_split_size, relaxed);
  max_non_split_rounding_.store(config.max_non_split_rounding, relaxed);
  roundup_bypass_threshold_.store(config.roundup_bypass_threshold, relaxed);
  any_divisions_.store(any, relaxed);
  version_.fetch_add(1, std::memory_order_release);  // after the values: a reader of the new version sees them
}

std::size_t size_policy::divisions_for(std::size_t bytes) const noexcept {
  return divisions_[allocator_config::roundup_interval(bytes)].load(std::memory_order_relaxed);
}

std::size_t size_policy::roundup_power2_division(std::size_t bytes, std::size_t divisions) noexcept {
  if (std::has_single_bit(bytes)) return bytes;
  const std::size_t floor = std::bit_floor(bytes);
  const std::size_t step = floor >> std::countr_zero(std::bit_floor(divisions));
  if (step == 0) return floor << 1;
  const std::size_t down = bytes & ~(step - 1);
  return down == bytes ? bytes : down + step;
}

std::size_t size_policy::round_size_divisions(std::size_t bytes) const noexcept {
  if (bytes < min_block_size) return min_block_size;
  if (bytes <= roundup_bypass_threshold_.load(std::memory_order_relaxed)) {
    const std::size_t divisions = divisions_for(bytes);
    if (divisions > 1 && bytes > min_block_size * divisions) return roundup_power2_division(bytes, divisions);
  }
  return round_up_512(bytes);
}

std::size_t size_policy::allocation_size(std::size_t rounded) const noexcept {
  if (rounded <= small_size) return small_buffer;
  if (rounded < min_large_alloc) return large_segment_size_;
  return (rounded + round_large - 1) / round_large * round_large;
}

}  // namespace streampool::native
