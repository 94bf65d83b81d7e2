// capture_filter.hpp — the one rule by which a stream filter routes a capture's allocations to its
// private pool: the allocating stream takes part in that capture sequence, side streams joined
// through events included, invalidated or not. capture_scope's filter (src/graph) and the C API's
// filter of the captures nobody announced (src/c_api) both ask a capture_sequence (Note [Capture
// filter] in src/graph/capture_scope.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "streampool/driver.hpp"

namespace streampool::capture {

/// The streams of one capture sequence as a stream filter sees them. CUDA gives a capture id only
/// while the capture is active (cudaStreamGetCaptureInfo: "a valid id is returned only if ... the
/// status is active"; the H200 returns none for an invalidated one), so a stream is in the sequence
/// when it reports the sequence's id while active, or reports its capture invalidated and was seen
/// in the sequence: its origin stream, or a stream accepted while active. An allocation of an
/// invalidated capture so stays in the capture's pool (which no graph will replay, and which is
/// given back when the capture ends), where cudaMalloc stays legal. Any thread.
class capture_sequence {
 public:
  capture_sequence(driver& drv, stream_t origin, std::uint64_t id = 0) : drv_(&drv), origin_(origin), id_(id) {}
  capture_sequence(const capture_sequence&) = delete;
  capture_sequence& operator=(const capture_sequence&) = delete;

  /// The id, once the capture has begun (0 until then: an active stream matches nothing).
  void set_id(std::uint64_t id) noexcept { id_.store(id, std::memory_order_release); }
  [[nodiscard]] std::uint64_t id() const noexcept { return id_.load(std::memory_order_acquire); }
  [[nodiscard]] stream_t origin() const noexcept { return origin_; }

  /// True when `stream` is in the sequence; a stream other than the origin accepted while active
  /// is remembered (side_streams). One driver call. False when the driver cannot say.
  [[nodiscard]] bool accepts(stream_t stream) noexcept {
    capture_info info;
    return drv_->stream_capture_info(stream, &info).ok() && accepts(stream, info);
  }
  /// accepts() with the capture info of `stream` already asked of the driver (no driver call).
  [[nodiscard]] bool accepts(stream_t stream, const capture_info& info) noexcept {
    if (info.status == capture_status::invalidated) return stream == origin_ || seen(stream);
    const std::uint64_t id = id_.load(std::memory_order_acquire);
    if (info.status != capture_status::active || id == 0 || info.id != id) return false;
    if (stream != origin_) remember(stream);
    return true;
  }
  /// The streams other than the origin accepted while active (capture_scope joins them).
  [[nodiscard]] std::vector<stream_t> side_streams() const {
    const std::lock_guard lock(mutex_);
    return side_streams_;
  }

 private:
  [[nodiscard]] bool seen(stream_t stream) const noexcept {
    const std::lock_guard lock(mutex_);
    return std::find(side_streams_.begin(), side_streams_.end(), stream) != side_streams_.end();
  }
  void remember(stream_t stream) noexcept {
    const std::lock_guard lock(mutex_);
    if (std::find(side_streams_.begin(), side_streams_.end(), stream) != side_streams_.end()) return;
    try {
      side_streams_.push_back(stream);
    } catch (...) {
      // Out of host memory: the stream is still routed while active; it is just not joined at the
      // end, nor routed once the capture is invalidated.
    }
  }

  driver* drv_;
  stream_t origin_;
  std::atomic<std::uint64_t> id_;
  mutable std::mutex mutex_;
  std::vector<stream_t> side_streams_;
};

}  // namespace streampool::capture
