// streampool_kernels.hpp — host entry points of the verification kernels (kernels/patterns.cu).
// Streams are passed as void* (a cudaStream_t), so callers need no CUDA headers. Each function
// returns 0 on success or the cudaError_t of the failed launch/copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streampool::kernels {

/// Writes byte i of [ptr, ptr + bytes) as a function of (seed, i), asynchronously on `stream`.
int fill_pattern(void* ptr, std::size_t bytes, std::uint32_t seed, void* stream);

/// Counts bytes of [ptr, ptr + bytes) that differ from fill_pattern(seed); waits for `stream` and
/// stores the count in *mismatches.
int count_mismatches(const void* ptr, std::size_t bytes, std::uint32_t seed, void* stream,
                     std::uint64_t* mismatches);

/// Keeps `stream` busy for about `microseconds`, then copies [src, src + bytes) to [dst, ...):
/// a late reader of `src`, for testing that a block is not reused while another stream uses it.
int delayed_copy(void* dst, const void* src, std::size_t bytes, std::uint32_t microseconds, void* stream);

/// Human-readable text of a return code of the functions above.
const char* error_text(int code);

}  // namespace streampool::kernels
