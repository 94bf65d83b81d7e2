// streampool/cuda_mr_resource.hpp — streampool as a libcu++ memory resource (cuda::mr, CCCL's
// experimental <cuda/memory_resource>): cuda_async_resource satisfies cuda::mr::resource and
// cuda::mr::async_resource (CCCL 2.x/3.0 names) with the device_accessible property, and also has
// the member names of the later CCCL interface (allocate_sync/deallocate_sync and
// allocate(stream, ...)/deallocate(stream, ...)). static_asserts below check it against the
// installed CCCL. See docs/integrations/thrust-cccl.md.
#pragma once

// <cuda/memory_resource> is empty unless this is defined before its first inclusion.
#if defined(_CUDA_MEMORY_RESOURCE) && !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#error "streampool/cuda_mr_resource.hpp: <cuda/memory_resource> was included without LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE; define it (e.g. -DLIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) or include this header first"
#endif
#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuda/version>

#include <cstddef>
#include <string>

#include "streampool/allocator.hpp"
#include "streampool/process_allocator.hpp"

namespace streampool {

/// Alignment every streampool allocation has (allocator::allocate: 512-byte aligned).
inline constexpr std::size_t allocation_alignment = 512;

/// A non-owning cuda::mr resource over `Upstream` (which must outlive it): a streampool::allocator
/// (cuda_async_resource) or the process's allocator (process_async_resource, process_allocator.hpp).
/// Synchronous allocate()/allocate_sync() use `default_stream` (legacy default stream unless
/// given); allocate_async(bytes, alignment, stream) allocates for `stream`, and
/// deallocate_async(ptr, ..., stream) frees after the work enqueued on `stream` (record_stream,
/// then a stream-ordered free). Alignments up to 512 (a power of two) are honoured; larger ones
/// throw streampool::error. Two resources are equal when they share the allocator.
template <typename Upstream>
class basic_async_resource {
 public:
  explicit basic_async_resource(Upstream& alloc, stream_t default_stream = nullptr) noexcept
      : alloc_(&alloc), default_stream_(default_stream) {}

  // --- CCCL 2.x / 3.0 concept: cuda::mr::resource + cuda::mr::async_resource -------------------
  /// @throws error for an alignment that is not a power of two or exceeds 512
  /// @throws out_of_memory / cuda_error as allocator::allocate()
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = allocation_alignment) {
    return allocate_on(bytes, alignment, default_stream_);
  }
  void deallocate(void* ptr, std::size_t /*bytes*/, std::size_t /*alignment*/ = allocation_alignment) noexcept {
    free_quietly(ptr);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return allocate_on(bytes, alignment, stream.get());
  }
  void deallocate_async(void* ptr, std::size_t /*bytes*/, std::size_t /*alignment*/,
                        ::cuda::stream_ref stream) noexcept {
    free_after(ptr, stream.get());
  }

  // --- later CCCL names: synchronous_resource (allocate_sync) + resource (stream first) ---------
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = allocation_alignment) {
    return allocate_on(bytes, alignment, default_stream_);
  }
  void deallocate_sync(void* ptr, std::size_t /*bytes*/, std::size_t /*alignment*/ = allocation_alignment) noexcept {
    free_quietly(ptr);
  }
  [[nodiscard]] void* allocate(::cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = allocation_alignment) {
    return allocate_on(bytes, alignment, stream.get());
  }
  void deallocate(::cuda::stream_ref stream, void* ptr, std::size_t /*bytes*/,
                  std::size_t /*alignment*/ = allocation_alignment) noexcept {
    free_after(ptr, stream.get());
  }

  [[nodiscard]] Upstream& upstream() const noexcept { return *alloc_; }

  friend bool operator==(const basic_async_resource& a, const basic_async_resource& b) noexcept {
    return a.alloc_ == b.alloc_;
  }
  friend bool operator!=(const basic_async_resource& a, const basic_async_resource& b) noexcept {
    return !(a == b);
  }
  /// Memory is device memory (cuda::mr property).
  friend void get_property(const basic_async_resource&, ::cuda::mr::device_accessible) noexcept {}

 private:
  void* allocate_on(std::size_t bytes, std::size_t alignment, stream_t stream) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > allocation_alignment) {
      throw error("streampool::cuda_async_resource: alignment " + std::to_string(alignment) +
                  " is not supported (a power of two up to 512 is)");
    }
    return alloc_->allocate(bytes == 0 ? 1 : bytes, stream);
  }
  void free_quietly(void* ptr) noexcept {
    try {
      alloc_->deallocate(ptr);
    } catch (...) {  // deallocate is noexcept in the concept; a foreign pointer leaves state unchanged
    }
  }
  void free_after(void* ptr, stream_t stream) noexcept {
    if (ptr == nullptr) return;
    try {
      alloc_->record_stream(ptr, stream);  // no effect when `stream` is the allocation's stream
    } catch (...) {
      return;  // not ours: nothing to free
    }
    free_quietly(ptr);
  }

  Upstream* alloc_;
  stream_t default_stream_;
};
using cuda_async_resource = basic_async_resource<allocator>;
using process_async_resource = basic_async_resource<process_allocator>;

// Checked against the installed CCCL. CCCL <= 3.0 names: resource (allocate(bytes, align)) and
// async_resource (allocate_async); both generations provide cuda::mr::resource and resource_with.
static_assert(::cuda::mr::resource<cuda_async_resource>, "cuda_async_resource must satisfy cuda::mr::resource");
static_assert(::cuda::mr::resource<process_async_resource>, "process_async_resource must satisfy cuda::mr::resource");
static_assert(::cuda::mr::resource_with<cuda_async_resource, ::cuda::mr::device_accessible>,
              "cuda_async_resource must be device_accessible");
#if defined(CCCL_VERSION) && CCCL_VERSION < 3001000
static_assert(::cuda::mr::async_resource<cuda_async_resource>,
              "cuda_async_resource must satisfy cuda::mr::async_resource");
static_assert(::cuda::mr::async_resource_with<cuda_async_resource, ::cuda::mr::device_accessible>,
              "cuda_async_resource must be an async_resource_with<device_accessible>");
#endif

}  // namespace streampool
