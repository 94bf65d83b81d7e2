// check_layout.hpp — where checking mode puts its bytes: the canary after each allocation, the
// poison in freed blocks, and the padded size asked of the wrapped backend.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streampool::check_impl {

// Note [Checking-mode layout]
// An allocation of n bytes asks the wrapped backend for padded_size(n): n plus at least
// min_canary_bytes, rounded up to 512 bytes, the block granularity of both backends (native
// rounds to 512 B, the CUDA pools pack 512 B blocks). So the canary [n, padded) covers exactly the
// slack a 512-byte-rounded block would have had, and never less than 64 bytes: a request that is
// already a multiple of 512 still gets a guard (512 bytes of it), and an off-by-one float4 or
// double2 store is caught wherever n falls. The canary is at most 575 bytes, which one block of
// the check kernel reads in three strided steps (Note [One block] in kernels/canary_check.cu).
// Backends that round further (roundup_power2_divisions, large segments) leave bytes after the
// canary unguarded; an overrun that lands there corrupts nothing but is not reported.
//
// Byte values: the canary is 0xFD (the "no man's land" guard byte of MSVC's debug heap), the
// poison 0xFF: every IEEE type reads it as NaN (float, double, half, bfloat16), so a kernel that
// computes on freed memory produces NaN instead of plausible numbers; integers read -1 and
// pointers 0xffff...ff, which faults. The two differ so that a freed block is never mistaken for
// an intact canary. A write of exactly 0xFD bytes past the end is the one overrun the canary
// cannot see.
inline constexpr std::uint8_t canary_byte = 0xFD;
inline constexpr std::uint8_t poison_byte = 0xFF;
inline constexpr std::size_t check_granularity = 512;
inline constexpr std::size_t min_canary_bytes = 64;

/// Bytes asked of the wrapped backend for a request of `requested` bytes (< 2^60, checked by the
/// allocator's public API before it gets here, so this cannot overflow).
[[nodiscard]] constexpr std::size_t padded_size(std::size_t requested) noexcept {
  return (requested + min_canary_bytes + check_granularity - 1) / check_granularity * check_granularity;
}

}  // namespace streampool::check_impl
