// streampool_thrust_usage.hpp — host entry points of kernels/thrust_usage.cu: Thrust, CUB and
// cuda::mr running on streampool memory through include/streampool/thrust_allocator.hpp and
// cuda_mr_resource.hpp. Used by tests/gpu/thrust_integration_test.cpp; callers need no CUDA or
// Thrust headers. Each function returns 0 on success, a cudaError_t (> 0) when CUDA or Thrust
// failed, or -1 when streampool threw; thrust_usage_last_error() says what happened.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streampool {
class allocator;
}

namespace streampool::kernels {

/// Fills a thrust::device_vector<uint32_t, thrust_allocator<uint32_t>> of `n` elements with
/// pseudo-random values, sorts it with thrust::sort(thrust::cuda::par(thrust_allocator<char>)
/// .on(stream), ...) (so the sort's temporaries also come from `alloc`), and stores whether the
/// result is sorted and still holds the same multiset (sum and xor of the values).
int thrust_sort_with_streampool(allocator& alloc, std::size_t n, void* stream, bool* sorted_ok);

/// Sums 1..n with cub::DeviceReduce::Sum; input, output and d_temp_storage come from `alloc`
/// (the temp storage through cub_call_with_temp_storage). Stores the sum and CUB's temp bytes.
int cub_reduce_with_streampool(allocator& alloc, std::size_t n, void* stream, std::uint64_t* sum,
                               std::size_t* temp_bytes);

/// Allocates `bytes` through streampool::cuda_async_resource, both through a
/// cuda::mr::async_resource_ref (allocate_async on `stream`, freed with deallocate_async on
/// `other_stream`) and a cuda::mr::resource_ref (synchronous), writes and reads back a pattern,
/// and stores whether every byte matched.
int mr_resource_roundtrip(allocator& alloc, std::size_t bytes, void* stream, void* other_stream, bool* ok);

/// Message of this thread's last failed call above ("" when the last call succeeded).
const char* thrust_usage_last_error();

}  // namespace streampool::kernels
