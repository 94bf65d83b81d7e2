// trace_ring.hpp — the per-device allocation trace: a bounded ring buffer of trace_entry, off by
// default. Recording costs one relaxed load when off, so backends call record() unconditionally.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "core/format.hpp"
#include "streampool/stats.hpp"

namespace streampool::core {

class trace_ring {
 public:
  /// On: keep the last `capacity` entries (clears what was kept). Off: clears and stops recording.
  void configure(bool enabled, std::size_t capacity) {
    std::lock_guard lock(mutex_);
    entries_.clear();
    entries_.shrink_to_fit();
    next_ = 0;
    wrapped_ = false;
    capacity_ = enabled ? capacity : 0;
    enabled_.store(enabled, std::memory_order_relaxed);
  }

  [[nodiscard]] bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  void record(trace_action action, int device, std::uintptr_t address, std::size_t size, stream_t stream,
              mempool_id pool = {}) {
    // The check inline, the entry out of line: a hot path that records while off then loads none
    // of the arguments (the compiler hoisted and spilled them when the entry was built inline).
    if (enabled()) [[unlikely]] record_entry(action, device, address, size, stream, pool);
  }

  /// Oldest first.
  [[nodiscard]] std::vector<trace_entry> entries() const {
    std::lock_guard lock(mutex_);
    if (!wrapped_) return entries_;
    std::vector<trace_entry> out;
    out.reserve(entries_.size());
    out.insert(out.end(), entries_.begin() + static_cast<std::ptrdiff_t>(next_), entries_.end());
    out.insert(out.end(), entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_));
    return out;
  }

 private:
  [[gnu::noinline, gnu::cold]] void record_entry(trace_action action, int device, std::uintptr_t address,
                                                 std::size_t size, stream_t stream, mempool_id pool) {
    const trace_entry entry{action, device, address, size, stream, pool, now_us()};
    std::lock_guard lock(mutex_);
    if (capacity_ == 0) return;
    if (entries_.size() < capacity_) {
      entries_.push_back(entry);
      return;
    }
    entries_[next_] = entry;
    next_ = (next_ + 1) % capacity_;
    wrapped_ = true;
  }

  mutable std::mutex mutex_;
  std::atomic<bool> enabled_{false};
  std::vector<trace_entry> entries_;
  std::size_t capacity_ = 0;
  std::size_t next_ = 0;
  bool wrapped_ = false;
};

}  // namespace streampool::core
