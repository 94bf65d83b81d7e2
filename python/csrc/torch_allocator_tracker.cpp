// torch_allocator_tracker.cpp — attachAllocatorTraceTracker: c10's trace trackers (what
// ProcessGroupNCCL's TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 attaches to register the
// allocator's segments with NCCL) told of streampool's segments through the allocator's segment
// listener, as SEGMENT_ALLOC / SEGMENT_FREE over the mapped memory (tracker_ranges.cpp,
// Note [Mapped ranges as segments]).
#include "torch_allocator.hpp"

#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "tracker_ranges.hpp"

namespace streampool::torch_ext {

using c10::CachingDeviceAllocator::TraceEntry;

// Note [Trackers told in order]
// The listener runs on the thread that changed the segments, with that device's lock held
// (Note [Segment listener] in src/core/trace_ring.cpp), as PyTorch calls its trackers under its
// allocator's lock. Translating an event and telling the trackers happen under one mutex, so a
// tracker hears the events of the ranges in the order tracker_ranges produced them, including the
// ones the attach itself tells after its snapshot. The mutex is recursive so that a tracker may
// attach another tracker from inside a call (it is told from the next event on). The snapshot of
// the attach is taken without that mutex: it takes the devices' locks, which a listener call
// holds while it waits for the mutex.
struct tracker_state {
  std::recursive_mutex mutex;
  std::vector<c10a::AllocatorTraceTracker> trackers;
  tracker_ranges ranges;
  bool listening = false;

  /// Tells every tracker each of `events`, under `mutex`. A tracker that throws is reported and
  /// the others (and the later events) are still told, so the ranges stay what they were told.
  void tell(const std::vector<tracker_event>& events) {
    const std::vector<c10a::AllocatorTraceTracker> now = trackers;
    for (const tracker_event& t : events) {
      const TraceEntry entry(t.registered ? TraceEntry::SEGMENT_ALLOC : TraceEntry::SEGMENT_FREE,
                             static_cast<c10::DeviceIndex>(t.device), t.address, t.size, t.stream,
                             {t.pool.first, t.pool.second}, 0);
      for (const auto& tracker : now) {
        try {
          tracker(entry);
        } catch (const std::exception& e) {
          TORCH_WARN("streampool: an allocator trace tracker failed on the ",
                     t.registered ? "SEGMENT_ALLOC" : "SEGMENT_FREE", " of ", t.size, " bytes at ",
                     reinterpret_cast<void*>(t.address), ": ", e.what());
        }
      }
    }
  }

  void hear(const trace_entry& e) {
    std::lock_guard<std::recursive_mutex> lock(mutex);
    std::vector<tracker_event> events;
    ranges.translate(e, events);
    if (!events.empty()) tell(events);
  }
};

std::size_t torch_allocator::tracker_count() {
  std::lock_guard<std::mutex> lock(tracker_init_mutex_);
  if (trackers_ == nullptr) return 0;
  std::lock_guard<std::recursive_mutex> state_lock(trackers_->mutex);
  return trackers_->trackers.size();
}

std::vector<std::tuple<int, std::uintptr_t, std::size_t>> torch_allocator::tracker_ranges_told() {
  std::vector<std::tuple<int, std::uintptr_t, std::size_t>> out;
  std::lock_guard<std::mutex> lock(tracker_init_mutex_);
  if (trackers_ == nullptr) return out;
  std::lock_guard<std::recursive_mutex> state_lock(trackers_->mutex);
  for (const tracker_event& t : trackers_->ranges.ranges()) out.emplace_back(t.device, t.address, t.size);
  return out;
}

void torch_allocator::attachAllocatorTraceTracker(c10a::AllocatorTraceTracker tracker) {
  TORCH_CHECK(tracker != nullptr, "streampool: attachAllocatorTraceTracker: the tracker is empty");
  TORCH_CHECK(impl().config().backend == backend_kind::native,
              "streampool: attachAllocatorTraceTracker is not supported on the cudaMallocAsync backend (nor is it on "
              "PyTorch's): its memory is one stream-ordered pool, not segments a tracker could register. For NCCL "
              "buffer registration (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1) use the native backend; "
              "otherwise leave that variable unset.");
  std::shared_ptr<tracker_state> state;
  {
    std::lock_guard<std::mutex> lock(tracker_init_mutex_);
    if (trackers_ == nullptr) trackers_ = std::make_shared<tracker_state>();
    state = trackers_;
  }
  bool first = false;
  {
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->trackers.push_back(std::move(tracker));
    first = !state->listening;
    state->listening = true;
  }
  if (!first) return;
  // Note [Mapped ranges as segments]: listen first (events are kept until the seed), then start
  // from a snapshot (taken without state->mutex: Note [Trackers told in order]).
  try {
    impl().set_segment_listener([state](const trace_entry& e) { state->hear(e); });
    const memory_snapshot snap = impl().snapshot();
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->tell(state->ranges.seed(snap.segments));
  } catch (const std::exception& e) {
    // Nothing stays half attached: no listener, no tracker; a later attach starts again.
    try {
      impl().set_segment_listener(nullptr);
    } catch (...) {
    }
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->trackers.clear();
    state->listening = false;
    state->ranges = tracker_ranges{};
    TORCH_CHECK(false, "streampool: attachAllocatorTraceTracker failed: ", e.what());
  }
}

}  // namespace streampool::torch_ext
