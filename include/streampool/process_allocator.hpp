// streampool/process_allocator.hpp — the process's one streampool allocator for C++ code, through
// the C API of libstreampool.so (c_api.h): the C API's own allocator, or, once the Python package
// has installed its PyTorch extension, the allocator PyTorch itself uses (the extension is the C
// API's delegate: streampool_set_delegate). So C++ code (Thrust, CUB, cuda::mr) shares one cache,
// one budget and one set of statistics with PyTorch, CuPy and Numba (docs/integrations/
// thrust-cccl.md, "One allocator per process"). It has the calls the adapters use (allocate,
// deallocate, record_stream), so thrust_allocator<T, process_allocator>, basic_temp_storage,
// cub_call_with_temp_storage and basic_async_resource<process_allocator> work on it as on a
// streampool::allocator. Link libstreampool.so (streampool::streampool_shared).
#pragma once

#include <cstddef>
#include <string>

#include "streampool/allocator.hpp"
#include "streampool/c_api.h"
#include "streampool/errors.hpp"

namespace streampool {

/// The process's streampool allocator, seen through the C API. Stateless: every object is the
/// same allocator (compare them by address of process_memory()).
class process_allocator {
 public:
  /// `bytes` for use on `stream` of `device` (current_device: the CUDA current device), 512-byte
  /// aligned. @throws out_of_memory, cuda_error or error with the C API's message
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = nullptr, int device = current_device) {
    void* ptr = streampool_alloc(bytes, device, stream);
    if (ptr == nullptr) {
      if (bytes == 0) throw error("streampool::process_allocator: allocate(0): ask for at least one byte");
      raise(streampool_last_status(), bytes, device);
    }
    return ptr;
  }
  /// Returns memory from allocate() (stream-ordered on its stream). nullptr is a no-op.
  /// @throws error for a pointer the process allocator did not hand out (nothing freed)
  void deallocate(void* ptr) {
    if (ptr != nullptr && streampool_free_unsized(ptr) != STREAMPOOL_OK) raise(streampool_last_status(), 0, -1);
  }
  /// As allocator::record_stream. @throws error for a pointer it did not hand out
  void record_stream(void* ptr, stream_t stream) {
    if (streampool_record_stream(ptr, stream) != STREAMPOOL_OK) raise(streampool_last_status(), 0, -1);
  }
  /// As allocator::empty_cache.
  void empty_cache() {
    if (streampool_empty_cache() != STREAMPOOL_OK) raise(streampool_last_status(), 0, -1);
  }
  /// Who serves it: the backend's name ("native", "cudaMallocAsync").
  [[nodiscard]] std::string backend_name() const {
    const char* name = streampool_backend_name();
    if (name == nullptr) raise(streampool_last_status(), 0, -1);
    return name;
  }

 private:
  [[noreturn]] static void raise(int status, std::size_t bytes, int device) {
    std::string message = streampool_last_error();
    if (message.empty()) message = "streampool: the C API failed with status " + std::to_string(status);
    switch (status) {
      case STREAMPOOL_ERROR_OUT_OF_MEMORY: throw out_of_memory(message, bytes, device);
      case STREAMPOOL_ERROR_CUDA: throw cuda_error(message, 0);
      default: throw error(message);
    }
  }
};

/// The one process_allocator object the adapters compare equal through.
[[nodiscard]] inline process_allocator& process_memory() noexcept {
  static process_allocator instance;
  return instance;
}

}  // namespace streampool
