// trace_ring.cpp — the out-of-line part of trace_ring (trace_ring.hpp): recording once something
// wants entries, and telling the segment listener (reporting one that threw).
#include "core/trace_ring.hpp"

#include <string>

#include "core/warnings.hpp"

namespace streampool::core {

// Note [Segment listener]
// allocator::set_segment_listener() gives a program (the PyTorch extension's
// attachAllocatorTraceTracker, whose main user is ProcessGroupNCCL's buffer registration) the
// segment events of the trace as they happen, whether history is on or not. Each device's
// trace_ring holds the listener: record() calls it for segment_* entries on the thread that made
// the change, which holds the device's lock, so events of one device arrive in the order of the
// changes and before any later allocation can reuse the memory; this is where and how PyTorch's
// allocator calls its trace trackers (also under its lock). Where an event is recorded is where
// the backend traces it: segment_alloc and segment_map after the memory is usable,
// segment_unmap after the unmap, and the native backend's segment_free just before the
// cudaFree (as PyTorch's, so that a registration can be dropped while the memory still exists).
// A listener that throws cannot undo the change it hears about: the exception is reported by
// warn() and dropped. Off (no listener, no history), record() costs the same one relaxed load.
namespace {

void report_listener_failure(const char* what) noexcept {
  try {
    warn(std::string("streampool: the segment listener failed (the event is dropped): ") + what);
  } catch (...) {
    // Nothing more can be reported; the allocator's change stands.
  }
}

}  // namespace

void trace_ring::record_wanted(unsigned flags, trace_entry entry) {
  entry.time_us = now_us();
  if ((flags & listener_flag) != 0 && is_segment_action(entry.action)) notify(entry);
  if ((flags & history_flag) == 0) return;
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

void trace_ring::notify(const trace_entry& entry) const noexcept {
  std::shared_ptr<const segment_listener> listener;
  try {
    std::lock_guard lock(mutex_);
    listener = listener_;
  } catch (...) {
    return;
  }
  if (listener == nullptr || !*listener) return;
  try {
    (*listener)(entry);
  } catch (const std::exception& e) {
    report_listener_failure(e.what());
  } catch (...) {
    report_listener_failure("an exception that is not a std::exception");
  }
}

}  // namespace streampool::core
