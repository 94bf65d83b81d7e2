// streampool/thrust_allocator.hpp — header-only adapters for Thrust and CUB (docs/integrations/
// thrust-cccl.md): thrust_allocator<T> makes thrust::device_vector<T, thrust_allocator<T>> and
// thrust::cuda::par(alloc) temporaries draw from a streampool::allocator; temp_storage and
// cub_call_with_temp_storage() run a CUB algorithm's two-phase temp-storage protocol on it. Each
// takes its upstream as a template argument: a streampool::allocator (the default), or the
// process's allocator through the C API (process_allocator.hpp: the one PyTorch, CuPy and Numba
// use). Needs the CUDA toolkit's headers (Thrust); device_vector itself needs nvcc.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

#include <thrust/device_ptr.h>
#include <thrust/device_reference.h>

#include "streampool/allocator.hpp"

namespace streampool {

/// A Thrust allocator (the std::allocator requirements with pointer = thrust::device_ptr<T>) over
/// a streampool::allocator. Memory comes from `stream` (default: the legacy default stream, which
/// is where device_vector's own kernels and copies run). When the algorithms that touch the memory
/// run on another stream (thrust::cuda::par.on(s)), pass that stream here.
///
/// Two thrust_allocators compare equal when they use the same streampool::allocator (memory from
/// one can be freed through the other). A default-constructed one is bound to no allocator and
/// throws streampool::error on allocate(): pass one to the container,
/// `thrust::device_vector<int, thrust_allocator<int>> v(n, thrust_allocator<int>(*alloc));`.
/// `Upstream`: any type with allocate(bytes, stream) and deallocate(ptr) as allocator has them,
/// e.g. process_allocator (`thrust_allocator<int, process_allocator>(process_memory())`).
template <typename T, typename Upstream = allocator>
class thrust_allocator {
 public:
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  using const_pointer = thrust::device_ptr<const T>;
  using void_pointer = thrust::device_ptr<void>;
  using const_void_pointer = thrust::device_ptr<const void>;
  using reference = thrust::device_reference<T>;
  using const_reference = thrust::device_reference<const T>;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;

  template <typename U>
  struct rebind {
    using other = thrust_allocator<U, Upstream>;
  };

  thrust_allocator() noexcept = default;
  explicit thrust_allocator(Upstream& alloc, stream_t stream = nullptr) noexcept : alloc_(&alloc), stream_(stream) {}
  template <typename U>
  thrust_allocator(const thrust_allocator<U, Upstream>& other) noexcept  // NOLINT: implicit, as allocators are
      : alloc_(other.upstream()), stream_(other.stream()) {}

  /// Memory for `n` objects of T, for use on stream(). Not initialised.
  /// @throws error when default-constructed, or n * sizeof(T) overflows
  /// @throws out_of_memory when streampool cannot serve the request
  [[nodiscard]] pointer allocate(size_type n) {
    if (alloc_ == nullptr) {
      throw error("streampool::thrust_allocator: allocate() on a default-constructed allocator; construct it "
                  "from a streampool::allocator& and pass it to the container");
    }
    if (n > max_size()) throw error("streampool::thrust_allocator: allocate(n): n * sizeof(T) overflows");
    const std::size_t bytes = n == 0 ? 1 : n * sizeof(T);  // streampool rejects 0-byte requests
    return pointer(static_cast<T*>(alloc_->allocate(bytes, stream_)));
  }

  /// Returns memory from allocate(); stream-ordered on the stream it was allocated for.
  void deallocate(pointer p, size_type /*n*/) noexcept {
    if (alloc_ == nullptr || p.get() == nullptr) return;
    try {
      alloc_->deallocate(static_cast<void*>(thrust::raw_pointer_cast(p)));
    } catch (...) {
      // Containers free in destructors: never throw from here. A pointer streampool does not know
      // is a caller bug that deallocate() has already reported through its exception message;
      // the allocator's state is unchanged (bad input never corrupts state: docs/reliability.md).
    }
  }

  [[nodiscard]] size_type max_size() const noexcept { return std::numeric_limits<size_type>::max() / sizeof(T); }

  [[nodiscard]] Upstream* upstream() const noexcept { return alloc_; }
  [[nodiscard]] stream_t stream() const noexcept { return stream_; }

  template <typename U>
  friend bool operator==(const thrust_allocator& a, const thrust_allocator<U, Upstream>& b) noexcept {
    return a.upstream() == b.upstream();
  }
  template <typename U>
  friend bool operator!=(const thrust_allocator& a, const thrust_allocator<U, Upstream>& b) noexcept {
    return !(a == b);
  }

 private:
  Upstream* alloc_ = nullptr;
  stream_t stream_ = nullptr;
};

/// RAII device scratch memory from streampool, for CUB's d_temp_storage (or any temporary):
/// allocated on `stream`, returned to the cache on `stream` when destroyed, so work enqueued on
/// `stream` before the destructor may still use it. temp_storage is the one over a
/// streampool::allocator; basic_temp_storage<process_allocator> the one over the process's.
template <typename Upstream>
class basic_temp_storage {
 public:
  /// @throws out_of_memory / cuda_error as allocator::allocate()
  basic_temp_storage(Upstream& alloc, std::size_t bytes, stream_t stream = nullptr)
      : alloc_(&alloc), bytes_(bytes), ptr_(alloc.allocate(bytes == 0 ? 1 : bytes, stream)) {}
  basic_temp_storage(const basic_temp_storage&) = delete;
  basic_temp_storage& operator=(const basic_temp_storage&) = delete;
  basic_temp_storage(basic_temp_storage&& other) noexcept
      : alloc_(other.alloc_), bytes_(other.bytes_), ptr_(std::exchange(other.ptr_, nullptr)) {}
  basic_temp_storage& operator=(basic_temp_storage&& other) noexcept {
    if (this != &other) {
      release();
      alloc_ = other.alloc_;
      bytes_ = other.bytes_;
      ptr_ = std::exchange(other.ptr_, nullptr);
    }
    return *this;
  }
  ~basic_temp_storage() { release(); }

  [[nodiscard]] void* get() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept {
    if (ptr_ == nullptr) return;
    try {
      alloc_->deallocate(ptr_);
    } catch (...) {  // cannot happen for our own pointer; never throw from a destructor
    }
    ptr_ = nullptr;
  }

  Upstream* alloc_;
  std::size_t bytes_;
  void* ptr_;
};
using temp_storage = basic_temp_storage<allocator>;

/// Runs CUB's two-phase protocol with streampool memory: `cub_call(d_temp_storage, temp_bytes)`
/// is called once with nullptr to query the size, then again with that much streampool memory
/// (allocated on `stream`, which must be the stream the CUB call runs on, and freed right after
/// the call is enqueued: stream order keeps it alive until the algorithm is done). Returns the
/// first non-success status (cudaError_t) or the second call's.
///
///   auto err = streampool::cub_call_with_temp_storage(*alloc, stream, [&](void* tmp, std::size_t& bytes) {
///     return cub::DeviceReduce::Sum(tmp, bytes, d_in, d_out, n, stream);
///   });
///
/// @throws out_of_memory / cuda_error as allocator::allocate()
template <typename Upstream, typename F>
auto cub_call_with_temp_storage(Upstream& alloc, stream_t stream, F&& cub_call)
    -> decltype(cub_call(static_cast<void*>(nullptr), std::declval<std::size_t&>())) {
  using status_type = decltype(cub_call(static_cast<void*>(nullptr), std::declval<std::size_t&>()));
  std::size_t bytes = 0;
  const status_type query = cub_call(static_cast<void*>(nullptr), bytes);
  if (query != status_type{}) return query;
  // d_temp_storage must be non-null on the second call (null means "query" to CUB).
  basic_temp_storage<Upstream> storage(alloc, bytes, stream);
  return cub_call(storage.get(), bytes);
}

}  // namespace streampool
