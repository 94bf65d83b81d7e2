// stream_events.cpp — per-stream event queues and event pools of the host allocator.
//
// Note [Per-stream event queues]
// Work on one stream completes in submission order, so the events recorded on it complete in
// the order they were recorded: a queue per stream can stop at its first incomplete event
// without missing a completed one behind it. PyTorch keeps a single queue for all streams and
// stops at the first incomplete event, so one stream with a long copy delays the reuse of
// blocks whose streams are long done; separate queues do not. Queues of streams that have
// emptied are kept (a few bytes; streams are few), so a stream's queue keeps its place.
#include "host/stream_events.hpp"

namespace streampool::host {

stream_events::~stream_events() {
  queues_.take_all([&](const pending_event& entry) { release(entry.device, entry.event); });
}

event_t stream_events::acquire(int device) {
  core::event_pool* pool = nullptr;
  {
    const std::lock_guard lock(pools_mutex_);
    std::unique_ptr<core::event_pool>& slot = pools_[device];
    if (!slot) slot = std::make_unique<core::event_pool>(driver_, device);
    pool = slot.get();
  }
  return pool->acquire();
}

void stream_events::release(int device, event_t event) noexcept {
  core::event_pool* pool = nullptr;
  {
    const std::lock_guard lock(pools_mutex_);
    const auto found = pools_.find(device);
    if (found != pools_.end()) pool = found->second.get();
  }
  if (pool != nullptr) {
    pool->release(event);
  } else {
    (void)driver_.event_destroy(device, event);
  }
}

void stream_events::push(stream_t stream, const pending_event& entry) {
  queues_.queue_for({stream, entry.device}).push_back(entry);
}

}  // namespace streampool::host
