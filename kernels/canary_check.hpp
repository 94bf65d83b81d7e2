// canary_check.hpp — host entry point of the checking-mode kernel (kernels/canary_check.cu),
// which libstreampool links when it is built with kernels (STREAMPOOL_BUILD_KERNELS): the real
// driver's check_bytes (src/driver/cuda/cuda_check_ops.cpp) launches it to verify the canary bytes
// after an allocation. No CUDA headers here: the library's C++ is compiled by the host compiler.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streampool::kernels {

/// Where the kernel leaves its answer: host-mapped pinned memory, which the host reads once the
/// stream is synchronised, with no copy. `done` is written last, after a system-wide fence, so
/// the host can tell an answer from a kernel that never ran.
struct byte_check_slot {
  std::uint64_t mismatches;
  std::uint64_t first_offset;  ///< UINT64_MAX when mismatches == 0
  std::uint32_t first_value;
  std::uint32_t done;          ///< 0 while pending; the host reads it through a volatile access
};

/// Launches one block on `stream` (a cudaStream_t) that compares [ptr, ptr + bytes) with
/// `expected` and fills *slot (a device-visible pointer to host-mapped memory). Returns the
/// cudaError_t of the launch (0 = launched).
int launch_byte_check(const void* ptr, std::size_t bytes, std::uint8_t expected, byte_check_slot* slot,
                      void* stream);

}  // namespace streampool::kernels
