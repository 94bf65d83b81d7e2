// event_queues.hpp — the events that the freed blocks of one arena wait for (record_stream, spec
// §2.9): one FIFO per stream a block was used on, each entry an event recorded on that stream at
// free time (core::stream_queues, as the host allocator's). A block is reusable once all its events
// have completed. Arena lock held throughout.
#pragma once

#include <cstddef>
#include <vector>

#include "core/stream_queues.hpp"
#include "native/block.hpp"
#include "native/device_context.hpp"

namespace streampool::native {

class event_queues {
 public:
  explicit event_queues(device_context& device) noexcept : device_(&device) {}

  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// One event per stream use of `b`, recorded and queued; uses cleared. All or nothing:
  /// @throws cuda_error (or bad_alloc) with nothing changed (Note [Failed frees]).
  void record(block* b);
  /// Pops the completed events at the head of each stream's queue; `done(b)` for each block whose
  /// last event completed. @throws cuda_error when a query fails (the events before it are done).
  template <typename Done>
  void poll(Done&& done) {
    drain(false, done);
  }
  /// Waits for every outstanding event (empty_cache, the OOM ladder's release-all); `done` as poll.
  template <typename Done>
  void synchronize(Done&& done) {
    drain(true, done);
  }
  /// Allocator teardown: every outstanding event goes back to the pool, no block completes.
  void release_all() noexcept;

 private:
  struct pending_event {
    event_t event = nullptr;
    block* owner = nullptr;
  };
  template <typename Done>
  void drain(bool wait, Done& done) {
    driver& drv = *device_->drv;
    queues_.drain(
        [&](const pending_event& head) {
          const drv_result result = wait ? drv.event_synchronize(head.event) : drv.event_query(head.event);
          if (!wait && result.code == status::not_ready) return false;
          if (!result.ok()) fail(wait ? "cudaEventSynchronize" : "cudaEventQuery", result);  // stays queued
          return true;
        },
        [&](const pending_event& head) {
          device_->events.release(head.event);
          --count_;
          device_->pending_events.fetch_sub(1, std::memory_order_relaxed);
          if (--head.owner->event_count == 0) done(head.owner);
        });
  }
  [[noreturn]] void fail(const char* call, const drv_result& result) const;

  device_context* device_;
  core::stream_queues<stream_t, pending_event> queues_;  // one per used stream
  std::size_t count_ = 0;         // outstanding events
  std::vector<event_t> scratch_;  // record()'s events before they are queued
};

}  // namespace streampool::native
