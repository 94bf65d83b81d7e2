// trace_ring.hpp — the per-device allocation trace: a bounded ring buffer of trace_entry, off by
// default, and the segment listener (allocator::set_segment_listener) that sees its segment events
// whether the ring is on or not. Recording costs one relaxed load when both are off, so backends
// call record() unconditionally.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
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
    set_flag(history_flag, enabled);
  }

  /// Note [Segment listener]: `listener` (nullptr: none) receives every segment_* entry recorded
  /// from now on, history on or off, on the recording thread (which holds the device's lock).
  void set_listener(std::shared_ptr<const segment_listener> listener) {
    std::lock_guard lock(mutex_);
    set_flag(listener_flag, listener != nullptr);
    listener_ = std::move(listener);
  }

  /// History (the ring) is on.
  [[nodiscard]] bool enabled() const noexcept { return (flags_.load(std::memory_order_relaxed) & history_flag) != 0; }
  /// Anything wants entries: history, or a segment listener. What a caller that builds an entry
  /// only to record it tests first.
  [[nodiscard]] bool wanted() const noexcept { return flags_.load(std::memory_order_relaxed) != 0; }

  /// Inline: one relaxed load while nothing wants entries (the hot paths trace every call).
  void record(trace_action action, int device, std::uintptr_t address, std::size_t size, stream_t stream,
              mempool_id pool = {}) {
    // The check inline, the entry out of line: a hot path that records while nothing wants
    // entries loads none of the arguments (the compiler hoisted and spilled them when the entry
    // was built inline).
    const unsigned flags = flags_.load(std::memory_order_relaxed);
    if (flags != 0) [[unlikely]] record_wanted(flags, trace_entry{action, device, address, size, stream, pool, 0});
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
  static constexpr unsigned history_flag = 1;
  static constexpr unsigned listener_flag = 2;

  [[nodiscard]] static bool is_segment_action(trace_action a) noexcept {
    return a == trace_action::segment_alloc || a == trace_action::segment_free || a == trace_action::segment_map ||
           a == trace_action::segment_unmap;
  }

  void set_flag(unsigned flag, bool on) noexcept {
    if (on) {
      flags_.fetch_or(flag, std::memory_order_relaxed);
    } else {
      flags_.fetch_and(~flag, std::memory_order_relaxed);
    }
  }

  /// record() once something wants entries (trace_ring.cpp): stamps the time, tells the listener
  /// of a segment event, appends to the ring when history is on.
  [[gnu::noinline, gnu::cold]] void record_wanted(unsigned flags, trace_entry entry);
  /// Calls the listener outside the ring's mutex; what it throws is reported through warn() and
  /// dropped (the allocator's state change it reports has happened and must not be half-undone).
  void notify(const trace_entry& entry) const noexcept;

  mutable std::mutex mutex_;
  std::atomic<unsigned> flags_{0};
  std::shared_ptr<const segment_listener> listener_;
  std::vector<trace_entry> entries_;
  std::size_t capacity_ = 0;
  std::size_t next_ = 0;
  bool wrapped_ = false;
};

}  // namespace streampool::core
