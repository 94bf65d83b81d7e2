// cuda_check_ops.cpp — the real driver's checking-mode calls: memset_async (cudaMemsetAsync) and
// check_bytes, which launches the kernel of kernels/canary_check.cu, compiled into the library
// when it is built with kernels (STREAMPOOL_HAVE_CHECK_KERNEL), and waits for its answer in
// host-mapped pinned memory. Without kernels check_bytes reports status::not_supported.
#include <cstdint>
#include <mutex>
#include <vector>

#include "driver/cuda/cuda_scopes.hpp"
#include "driver/cuda/cuda_driver.hpp"

#ifdef STREAMPOOL_HAVE_CHECK_KERNEL
#include "canary_check.hpp"
#endif

namespace streampool::driver_impl {
namespace {

#ifdef STREAMPOOL_HAVE_CHECK_KERNEL
using kernels::byte_check_slot;

// Note [Check slots]
// The kernel writes its answer into host-mapped pinned memory, so reading it needs no copy.
// Slots come from chunks of 64 taken with cudaHostAlloc on first need and kept for the life of
// the process (a few KiB; a slot goes back to the free list after each check), so a check costs
// no allocation. cudaHostAlloc and the wait (cudaStreamSynchronize) are "potentially unsafe"
// under a global capture; both run in relaxed capture mode (Note [Relaxed queries]): neither is
// a stream operation of the capturing stream (check_bytes refuses a capturing stream first), so
// another thread's capture stays valid.

/// A slot as the host sees it and as the device addresses it.
struct check_slot {
  byte_check_slot* host = nullptr;
  byte_check_slot* device = nullptr;
};

class slot_pool {
 public:
  /// `drv`: the real driver, to switch the thread to relaxed capture mode for cudaHostAlloc.
  drv_result take(driver& drv, check_slot* out) noexcept {
    const std::lock_guard lock(mutex_);
    if (free_.empty()) {
      constexpr std::size_t chunk = 64;
      void* memory = nullptr;
      void* device_memory = nullptr;
      const relaxed_thread_scope relaxed(drv, true);
      cudaError_t error =
          cudaHostAlloc(&memory, chunk * sizeof(byte_check_slot), cudaHostAllocMapped | cudaHostAllocPortable);
      if (error != cudaSuccess) return runtime_result(error);
      error = cudaHostGetDevicePointer(&device_memory, memory, 0);
      if (error != cudaSuccess) {
        (void)cudaFreeHost(memory);
        return runtime_result(error);
      }
      try {
        for (std::size_t i = 0; i < chunk; ++i) {
          free_.push_back({static_cast<byte_check_slot*>(memory) + i, static_cast<byte_check_slot*>(device_memory) + i});
        }
      } catch (...) {
        free_.clear();  // only this chunk's slots can be in it: the list was empty
        (void)cudaFreeHost(memory);
        return {status::other, 0};
      }
    }
    *out = free_.back();
    free_.pop_back();
    return {};
  }
  void give_back(check_slot slot) noexcept {
    const std::lock_guard lock(mutex_);
    free_.push_back(slot);  // capacity is never exceeded: every slot came from this vector
  }

 private:
  std::mutex mutex_;
  std::vector<check_slot> free_;
};

slot_pool& slots() {
  static auto* pool = new slot_pool;  // never destroyed: checks may run during static destruction
  return *pool;
}
#endif

}  // namespace

drv_result cuda_driver::memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                                     stream_t stream) noexcept {
  if (bytes == 0) return {};
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) return runtime_result(scope.error());
  return runtime_result(cudaMemsetAsync(ptr, value, bytes, static_cast<cudaStream_t>(stream)));
}

drv_result cuda_driver::check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                                    stream_t stream, byte_check* out) noexcept {
  *out = byte_check{};
#ifndef STREAMPOOL_HAVE_CHECK_KERNEL
  (void)device, (void)ptr, (void)bytes, (void)expected, (void)stream;
  return {status::not_supported, 0};
#else
  if (bytes == 0) return {};
  const device_scope scope(device);
  if (scope.error() != cudaSuccess) return runtime_result(scope.error());
  const auto native_stream = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (const cudaError_t error = cudaStreamIsCapturing(native_stream, &capture); error != cudaSuccess) {
    return runtime_result(error);
  }
  if (capture != cudaStreamCaptureStatusNone) return {status::illegal_in_capture, 0};

  check_slot taken;
  if (const drv_result got = slots().take(*this, &taken); !got.ok()) return got;
  byte_check_slot* slot = taken.host;
  slot->mismatches = 0;
  slot->first_offset = 0;
  slot->first_value = 0;
  *static_cast<volatile std::uint32_t*>(&slot->done) = 0;
  drv_result result{};
  bool launched = false;
  if (const int code = kernels::launch_byte_check(ptr, bytes, expected, taken.device, stream); code != 0) {
    result = runtime_result(static_cast<cudaError_t>(code));
  } else {
    launched = true;
    const relaxed_thread_scope relaxed(*this, true);  // Note [Check slots]
    result = runtime_result(cudaStreamSynchronize(native_stream));
  }
  if (result.ok()) {
    if (*static_cast<volatile std::uint32_t*>(&slot->done) == 0) {
      result = {status::other, 0};  // the stream finished without the kernel's answer: cannot happen
    } else {
      out->mismatches = static_cast<std::size_t>(slot->mismatches);
      out->first_offset = out->mismatches != 0 ? static_cast<std::size_t>(slot->first_offset) : 0;
      out->first_value = static_cast<std::uint8_t>(slot->first_value);
    }
  }
  // A kernel launched into a stream whose wait failed may still write its slot later: that slot
  // is not reused (a few bytes lost, only on that failure).
  if (result.ok() || !launched) slots().give_back(taken);
  return result;
#endif
}

}  // namespace streampool::driver_impl
