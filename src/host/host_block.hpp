// host_block.hpp (internal) — a block of the pinned host allocator and the power-of-two size
// classes it is filed under. Blocks are never split or merged: each is one size class.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "streampool/driver.hpp"

namespace streampool::host {

/// Size classes: index i holds blocks of 2^i bytes.
inline constexpr std::size_t size_class_count = 64;
/// The largest block: larger requests cannot be rounded to a power of two.
inline constexpr std::size_t max_block_size = std::size_t{1} << 63;

/// `bytes` rounded up to a power of two (1 <= bytes <= max_block_size).
[[nodiscard]] inline std::size_t round_block_size(std::size_t bytes) noexcept { return std::bit_ceil(bytes); }
/// The size class of a power-of-two `size`.
[[nodiscard]] inline std::size_t size_class(std::size_t size) noexcept {
  return static_cast<std::size_t>(std::countr_zero(size));
}

/// Where a block's memory came from (how it is given back).
enum class block_origin : std::uint8_t {
  host_alloc,  ///< its own driver host_alloc
  registered,  ///< its own malloc + host_register
  reserve,     ///< carved from the reserve segment: never given back on its own
};

struct host_block {
  void* ptr = nullptr;
  std::size_t size = 0;       ///< power of two
  std::size_t requested = 0;  ///< bytes asked for by the current allocation
  block_origin origin = block_origin::host_alloc;
  bool allocated = false;     ///< handed out (between allocate and deallocate)
  bool retired = false;       ///< an event could not be recorded: held until empty_cache frees it
  std::size_t pending_events = 0;  ///< events recorded at deallocate not yet seen complete
  std::vector<stream_t> streams;   ///< streams recorded since allocate (no duplicates)
};

}  // namespace streampool::host
