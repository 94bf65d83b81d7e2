// event_queues.cpp — recording the events of a freed block's stream uses, all or nothing (Note
// [Failed frees]), and the teardown. Polling and waiting are templates in event_queues.hpp (the
// arena's completion step is inlined into them).
#include "native/event_queues.hpp"

#include <string>

#include "core/format.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

// Note [Failed frees]
// allocator.hpp promises that a deallocate that throws leaves the state unchanged. The only
// driver calls a free makes are for a block with record_stream uses: one event per used stream,
// taken from the event pool (cudaEventCreate when the pool is empty) and recorded on that stream.
// event_queues::record() does everything that can fail before it changes anything: it finds (or
// makes) each stream's queue with room for one more entry, acquires every event, then records
// them; on any failure it gives the events back to the pool (a recorded event can be re-recorded
// later) and throws cuda_error. stream_arena::free_request() calls it before it touches
// statistics or the trace and puts the block back into the live map when it throws, so the
// pointer stays allocated and the caller may retry deallocate() once the driver recovers. (The
// first version waited for the stream instead of recording an event, freed the block and then
// threw: the caller saw an error for a free that had happened, and a retry was a double free.) A
// parked free (capture) that fails here when the capture has ended stays parked and is retried by
// the next slow-path allocation or empty_cache(), which report the error meanwhile.
void event_queues::record(block* b) {
  driver& drv = *device_->drv;
  const std::size_t n = b->uses.size();
  std::vector<event_t>& events = scratch_;  // grows to the largest use count, then no allocation
  events.clear();
  events.reserve(n);
  const auto give_back = [&]() noexcept {
    for (const event_t e : events) device_->events.release(e);
    events.clear();
  };
  const auto failed = [&](const std::string& why, int native) {
    give_back();
    throw cuda_error("streampool: deallocate(" + core::format_pointer(b->ptr) +
                         "): could not order the reuse of a block after its streams: " + why +
                         "; the block is still allocated: retry deallocate() once the driver recovers",
                     native);
  };
  try {
    for (std::size_t i = 0; i < n; ++i) {
      core::ring_buffer<pending_event>& items = queues_.queue_for(b->uses[i].stream);
      items.reserve(items.size() + 1);
      events.push_back(device_->events.acquire());
    }
  } catch (const cuda_error& e) {
    failed(e.what(), e.native_status());
  } catch (...) {
    give_back();
    throw;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const drv_result recorded = drv.event_record(events[i], b->uses[i].stream);
    if (!recorded.ok()) failed("cudaEventRecord on stream " + core::format_pointer(b->uses[i].stream) + ": " +
                                   drv.describe(recorded),
                               recorded.native);
  }
  // Nothing below allocates or fails.
  for (std::size_t i = 0; i < n; ++i) {
    queues_.queue_for(b->uses[i].stream).push_back({events[i], b});
    ++b->event_count;
    ++count_;
    device_->pending_events.fetch_add(1, std::memory_order_relaxed);
  }
  b->uses.clear();
  events.clear();
}

void event_queues::fail(const char* call, const drv_result& result) const {
  throw cuda_error("streampool: " + std::string(call) + " failed: " + device_->drv->describe(result), result.native);
}

void event_queues::release_all() noexcept {
  queues_.take_all([&](const pending_event& entry) { device_->events.release(entry.event); });
}

}  // namespace streampool::native
