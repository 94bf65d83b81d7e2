// c_api_capture.hpp — captures the C API was not told about: PyTorch's pluggable allocator route
// (and any C caller) never announces a CUDA graph capture, so the C entry points look at the
// capture status of each call's stream and, for a capture no recording covers, open a private pool
// for it themselves, end the routing when the capture is over and release the pool once the
// graph is destroyed. Note [Captures the C API was not told about] in c_api_capture.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "streampool/allocator.hpp"

namespace streampool::c_api_impl {

struct unannounced_capture;  // c_api_capture.cpp

/// What the driver's graph-release callbacks reach: they may run after the guard is gone.
struct capture_guard_signals {
  std::atomic<std::uint32_t> routing{0};   ///< captures whose routing is still open
  std::atomic<std::uint32_t> released{0};  ///< graphs gone whose pool is not yet released
};

/// One per C API allocator. Thread-safe.
class capture_guard {
 public:
  capture_guard();
  capture_guard(const capture_guard&) = delete;
  capture_guard& operator=(const capture_guard&) = delete;
  ~capture_guard();

  /// Before an allocation (or a free of the cudaMallocAsync backend) on `stream` of `device`: ends
  /// the routing of tracked captures that are over and releases the pools of graphs that are gone
  /// (only when there are some: two relaxed loads otherwise), then, unless `stream` is the legacy
  /// default stream (which never captures), asks the driver for its capture status; a capture the
  /// guard does not track yet gets a private pool (begin_allocate_to_pool with a filter on its
  /// capture id), so the call that follows is routed there.
  /// @throws error naming the routes that announce captures when the routing cannot be opened
  void before_call(allocator& alloc, int device, stream_t stream) {
    sweep_if_needed(alloc);
    if (reinterpret_cast<std::uintptr_t>(stream) > 1) check_stream(alloc, device, stream);  // not legacy
  }

  /// The first half of before_call: ends routings of captures that are over and releases the pools
  /// of graphs that are gone, when there are any (native frees and streampool_empty_cache call it).
  void sweep_if_needed(allocator& alloc) {
    if ((signals_->routing.load(std::memory_order_relaxed) | signals_->released.load(std::memory_order_relaxed)) != 0) {
      sweep(alloc);
    }
  }

  /// Captures tracked (routing open, or pool held until the graph is gone). For tests.
  [[nodiscard]] std::size_t tracked() const;

 private:
  void sweep(allocator& alloc);
  void check_stream(allocator& alloc, int device, stream_t stream);
  void open(allocator& alloc, int device, stream_t stream, capture_info info);
  /// open() under mutex_: false when the capture is tracked already; `attached` is the result of
  /// tying the graph-release callback (ok when not tried).
  bool open_locked(allocator& alloc, int device, stream_t stream, capture_info info, drv_result& attached);

  std::shared_ptr<capture_guard_signals> signals_;
  mutable std::mutex mutex_;  ///< captures_; opening and ending routings
  std::vector<std::shared_ptr<unannounced_capture>> captures_;
};

}  // namespace streampool::c_api_impl
