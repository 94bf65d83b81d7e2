// stream_events.hpp (internal) — the events the host allocator waits on: one FIFO per stream of
// (event, block) recorded at deallocate (core::stream_queues, as the native backend's), drained by
// querying from the front, and per-device event pools so no event is created per free. Not
// thread-safe: host_cache guards it with its mutex (the pools have their own). See Note
// [Per-stream event queues].
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/event_pool.hpp"
#include "core/stream_queues.hpp"
#include "host/host_block.hpp"

namespace streampool::host {

struct pending_event {
  event_t event = nullptr;
  int device = 0;
  host_block* block = nullptr;
};

class stream_events {
 public:
  explicit stream_events(driver& drv) : driver_(drv) {}
  ~stream_events();
  stream_events(const stream_events&) = delete;
  stream_events& operator=(const stream_events&) = delete;

  /// An event of `device` from its pool (thread-safe). @throws cuda_error
  [[nodiscard]] event_t acquire(int device);
  /// Back to its pool (thread-safe).
  void release(int device, event_t event) noexcept;

  /// Files an event recorded on `stream` for `block`.
  void push(stream_t stream, const pending_event& entry);
  /// Queries the front of every stream's queue, popping completed events (returned to their
  /// pool) and calling on_done(block) for each; stops at a stream's first incomplete event.
  /// Never waits.
  template <class OnDone>
  void drain(OnDone&& on_done) {
    queues_.drain(
        // Not ready, refused (capture) or failed: keep it and look later.
        [&](const pending_event& front) { return driver_.event_query(front.event).ok(); },
        [&](const pending_event& done) {
          release(done.device, done.event);
          on_done(done.block);
        });
  }
  /// Waits for every pending event and hands each block to on_done (destruction only).
  template <class OnDone>
  void wait_all(OnDone&& on_done) {
    queues_.take_all([&](const pending_event& entry) {
      (void)driver_.event_synchronize(entry.event);
      release(entry.device, entry.event);
      on_done(entry.block);
    });
  }
  [[nodiscard]] bool empty() const noexcept { return queues_.empty(); }

 private:
  driver& driver_;
  /// One queue per (stream, device): the legacy stream (nullptr) is one per device.
  core::stream_queues<std::pair<stream_t, int>, pending_event> queues_;
  std::mutex pools_mutex_;
  std::map<int, std::unique_ptr<core::event_pool>> pools_;
};

}  // namespace streampool::host
