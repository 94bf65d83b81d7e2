// torch_allocator_tracker.cpp — the extension's one segment listener and who hears it:
// attachAllocatorTraceTracker's trackers (what ProcessGroupNCCL's
// TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 attaches to register the allocator's segments
// with NCCL), told of streampool's segments as SEGMENT_ALLOC / SEGMENT_FREE over the mapped memory
// (tracker_ranges.cpp, Note [Mapped ranges as segments]), and the descriptors of pages sent to
// other processes, closed when their memory is unmapped (ipc_export.cpp).
#include "torch_allocator.hpp"

#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "ipc_export.hpp"
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

// Note [One segment listener]
// The allocator has one segment listener; the extension sets it once, at the first attach of a
// tracker or the first export of expandable pages, to a segment_hub that passes each event to the
// page exports (closing the descriptors of unmapped pages) and to the trackers' state. Each part
// is created once and never replaced, so the listener reads them under the hub's mutex only to
// copy two pointers.
struct segment_hub {
  std::mutex mutex;
  bool listening = false;
  std::shared_ptr<tracker_state> trackers;
  std::shared_ptr<ipc::page_exports> exports;

  void hear(const trace_entry& e) {
    std::shared_ptr<tracker_state> t;
    std::shared_ptr<ipc::page_exports> x;
    {
      std::lock_guard<std::mutex> lock(mutex);
      t = trackers;
      x = exports;
    }
    if (x != nullptr) x->on_segment_event(e);
    if (t != nullptr) t->hear(e);
  }
};

segment_hub& torch_allocator::hub() {
  std::lock_guard<std::mutex> lock(hub_mutex_);
  if (hub_ == nullptr) hub_ = std::make_shared<segment_hub>();
  if (!hub_->listening) {
    std::shared_ptr<segment_hub> hub = hub_;
    impl().set_segment_listener([hub](const trace_entry& e) { hub->hear(e); });
    hub_->listening = true;
  }
  return *hub_;
}

ipc::page_exports& torch_allocator::page_exports() {
  segment_hub& h = hub();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (h.exports == nullptr) h.exports = std::make_shared<ipc::page_exports>();
  return *h.exports;
}

std::size_t torch_allocator::tracker_count() {
  std::shared_ptr<tracker_state> state;
  {
    std::lock_guard<std::mutex> lock(hub_mutex_);
    if (hub_ == nullptr) return 0;
    std::lock_guard<std::mutex> hub_lock(hub_->mutex);
    state = hub_->trackers;
  }
  if (state == nullptr) return 0;
  std::lock_guard<std::recursive_mutex> state_lock(state->mutex);
  return state->trackers.size();
}

std::vector<std::tuple<int, std::uintptr_t, std::size_t>> torch_allocator::tracker_ranges_told() {
  std::vector<std::tuple<int, std::uintptr_t, std::size_t>> out;
  std::shared_ptr<tracker_state> state;
  {
    std::lock_guard<std::mutex> lock(hub_mutex_);
    if (hub_ == nullptr) return out;
    std::lock_guard<std::mutex> hub_lock(hub_->mutex);
    state = hub_->trackers;
  }
  if (state == nullptr) return out;
  std::lock_guard<std::recursive_mutex> state_lock(state->mutex);
  for (const tracker_event& t : state->ranges.ranges()) out.emplace_back(t.device, t.address, t.size);
  return out;
}

void torch_allocator::attachAllocatorTraceTracker(c10a::AllocatorTraceTracker tracker) {
  TORCH_CHECK(tracker != nullptr, "streampool: attachAllocatorTraceTracker: the tracker is empty");
  TORCH_CHECK(impl().config().backend == backend_kind::native,
              "streampool: attachAllocatorTraceTracker is not supported on the cudaMallocAsync backend (nor is it on "
              "PyTorch's): its memory is one stream-ordered pool, not segments a tracker could register. For NCCL "
              "buffer registration (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1) use the native backend; "
              "otherwise leave that variable unset.");
  segment_hub* h = nullptr;
  try {
    h = &hub();  // Note [One segment listener]
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: attachAllocatorTraceTracker failed: ", e.what());
  }
  std::shared_ptr<tracker_state> state;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(h->mutex);
    if (h->trackers == nullptr) {
      h->trackers = std::make_shared<tracker_state>();
      first = true;
    }
    state = h->trackers;
  }
  {
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->trackers.push_back(std::move(tracker));
  }
  if (!first) return;
  // Note [Mapped ranges as segments]: the hub passes events on from now (kept until the seed);
  // the snapshot is taken without state->mutex (Note [Trackers told in order]).
  try {
    const memory_snapshot snap = impl().snapshot();
    std::lock_guard<std::recursive_mutex> lock(state->mutex);
    state->tell(state->ranges.seed(snap.segments));
  } catch (const std::exception& e) {
    // Nothing stays half attached: no trackers; a later attach starts again.
    {
      std::lock_guard<std::mutex> lock(h->mutex);
      h->trackers = nullptr;
    }
    TORCH_CHECK(false, "streampool: attachAllocatorTraceTracker failed: ", e.what());
  }
}

}  // namespace streampool::torch_ext
