// stream_arena.cpp — the per-(device, pool, stream) block logic off the hot path: block objects,
// events for record_stream'ed blocks (§2.9), frees parked by a capture (§3.4), segments and
// statistics. Best fit, split and merge (docs/pytorch-compatibility.md §2.6–§2.8) are in hot_path.cpp.
#include "native/stream_arena.hpp"

#include <string>
#include <vector>

#include "core/format.hpp"
#include "native/device_state.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

stream_arena::stream_arena(device_state& device, stream_t stream, private_pool* pool, mempool_id pool_id)
    : device_(&device), gc_clock_(&device.gc_clock), stream_(stream), pool_(pool), pool_id_(pool_id) {}

stream_arena::~stream_arena() = default;

void stream_arena::reassign(stream_t stream, private_pool* pool, mempool_id pool_id) noexcept {
  stream_ = stream;
  pool_ = pool;
  pool_id_ = pool_id;
}

void stream_arena::raise_device_peak(std::size_t index) noexcept { device_->raise_peak(index); }

// --- blocks and free lists ----------------------------------------------------------------------

void stream_arena::add_chunk() {
  constexpr std::size_t chunk = 64;
  chunks_.reserve(chunks_.size() + 1);
  auto objects = std::make_unique<block[]>(chunk);
  for (std::size_t i = 0; i < chunk; ++i) recycle(&objects[i]);
  chunks_.push_back(std::move(objects));
}

block* stream_arena::largest_free() const noexcept {
  block* big = large_.largest();
  block* small = small_.largest();
  if (big == nullptr) return small;
  if (small == nullptr) return big;
  return big->size >= small->size ? big : small;
}

// --- events (docs/pytorch-compatibility.md §2.9) --------------------------------------------------------------------------

// Note [Failed frees]
// allocator.hpp promises that a deallocate that throws leaves the state unchanged. The only
// driver calls a free makes are for a block with record_stream uses: one event per used stream,
// taken from the event pool (cudaEventCreate when the pool is empty) and recorded on that stream.
// record_events() does everything that can fail before it changes anything: it finds (or makes)
// each stream's queue with room for one more entry, acquires every event, then records them; on
// any failure it gives the events back to the pool (a recorded event can be re-recorded later)
// and throws cuda_error. free_request() calls it before it touches statistics or the trace and
// puts the block back into the live map when it throws, so the pointer stays allocated and the
// caller may retry deallocate() once the driver recovers. (The first version waited for the
// stream instead of recording an event, freed the block and then threw: the caller saw an error
// for a free that had happened, and a retry was a double free.) A parked free (capture) that
// fails here when the capture has ended stays parked and is retried by the next slow-path
// allocation or empty_cache(), which report the error meanwhile.
void stream_arena::record_events(block* b) {
  driver& drv = device_->drv();
  const std::size_t n = b->uses.size();
  std::vector<event_t>& events = event_scratch_;  // grows to the largest use count, then no allocation
  events.clear();
  events.reserve(n);
  const auto give_back = [&]() noexcept {
    for (const event_t e : events) device_->events().release(e);
    events.clear();
  };
  const auto fail = [&](const std::string& why, int native) {
    give_back();
    throw cuda_error("streampool: deallocate(" + detail::format_pointer(b->ptr) +
                         "): could not order the reuse of a block after its streams: " + why +
                         "; the block is still allocated: retry deallocate() once the driver recovers",
                     native);
  };
  try {
    for (std::size_t i = 0; i < n; ++i) {
      ring_buffer<pending_event>& items = queue_for(b->uses[i].stream).items;
      items.reserve(items.size() + 1);
      events.push_back(device_->events().acquire());
    }
  } catch (const cuda_error& e) {
    fail(e.what(), e.native_status());
  } catch (...) {
    give_back();
    throw;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const drv_result recorded = drv.event_record(events[i], b->uses[i].stream);
    if (!recorded.ok()) fail("cudaEventRecord on stream " + detail::format_pointer(b->uses[i].stream) + ": " +
                                 drv.describe(recorded),
                             recorded.native);
  }
  // Nothing below allocates or fails.
  for (std::size_t i = 0; i < n; ++i) {
    queue_for(b->uses[i].stream).items.push_back({events[i], b});
    ++b->event_count;
    ++pending_events_;
    device_->pending_events.fetch_add(1, std::memory_order_relaxed);
  }
  b->uses.clear();
  events.clear();
}

stream_arena::event_queue& stream_arena::queue_for(stream_t stream) {
  for (event_queue& q : queues_) {
    if (q.stream == stream) return q;
  }
  return queues_.emplace_back(event_queue{stream, {}});
}

void stream_arena::event_done(block* b) noexcept {
  --pending_events_;
  device_->pending_events.fetch_sub(1, std::memory_order_relaxed);
  if (--b->event_count == 0) complete_pending(b);
}

void stream_arena::process_events() {
  driver& drv = device_->drv();
  for (event_queue& q : queues_) {
    while (!q.items.empty()) {
      const pending_event head = q.items.front();
      const drv_result result = drv.event_query(head.event);
      if (result.code == status::not_ready) break;
      if (!result.ok()) {
        throw cuda_error("streampool: cudaEventQuery failed: " + drv.describe(result), result.native);
      }
      q.items.pop_front();
      device_->events().release(head.event);
      event_done(head.owner);
    }
  }
}

void stream_arena::synchronize_events() {
  driver& drv = device_->drv();
  for (event_queue& q : queues_) {
    while (!q.items.empty()) {
      const pending_event head = q.items.front();
      const drv_result result = drv.event_synchronize(head.event);
      if (!result.ok()) {
        throw cuda_error("streampool: cudaEventSynchronize failed: " + drv.describe(result), result.native);
      }
      q.items.pop_front();
      device_->events().release(head.event);
      event_done(head.owner);
    }
  }
}

void stream_arena::complete_deferred(block* b) {
  b->uses.drop_capture_uses();  // the capture's own stream order covers them (docs/pytorch-compatibility.md §3.4)
  if (b->uses.empty()) {
    b->deferred = false;
    complete_pending(b);
    return;
  }
  record_events(b);  // all or nothing (Note [Failed frees])
  b->deferred = false;
}

// --- segments ---------------------------------------------------------------------------------------

block* stream_arena::attach_segment(segment* seg) {
  block* b = new_block();
  b->ptr = seg->base;
  b->size = seg->size;
  b->seg = seg;
  seg->arena = this;
  seg->head = b;
  seg->prev = nullptr;
  seg->next = segments_;
  if (segments_ != nullptr) segments_->prev = seg;
  segments_ = seg;
  ++segment_count_;
  return b;
}

void stream_arena::unlink_segment(segment* seg) noexcept {
  if (seg->prev != nullptr) seg->prev->next = seg->next;
  else segments_ = seg->next;
  if (seg->next != nullptr) seg->next->prev = seg->prev;
  --segment_count_;
}

void stream_arena::detach_segment(block* b) noexcept {
  remove_free(b);
  unlink_segment(b->seg);
}

void stream_arena::reattach_segment(block* b) noexcept {
  segment* seg = b->seg;
  seg->prev = nullptr;
  seg->next = segments_;
  if (segments_ != nullptr) segments_->prev = seg;
  segments_ = seg;
  ++segment_count_;
  insert_free(b);
}

void stream_arena::release_at_exit() noexcept {
  for (event_queue& q : queues_) {
    while (!q.items.empty()) {
      device_->events().release(q.items.front().event);
      q.items.pop_front();
    }
  }
  while (segment* seg = segments_) {
    segments_ = seg->next;
    if (seg->expandable) {
      release_expandable_at_exit(seg);
    } else {
      (void)device_->drv().free(device_->index(), reinterpret_cast<void*>(seg->base));
    }
    delete seg;
  }
  segment_count_ = 0;
}

// --- statistics -------------------------------------------------------------------------------------

namespace {

/// The counter that active (or active_bytes) is derived from (Note [Derived active counters]).
constexpr arena_stat_kind base_of(arena_stat_kind kind) noexcept {
  return kind == arena_stat_kind::active ? arena_stat_kind::allocation : arena_stat_kind::allocated_bytes;
}
constexpr bool is_derived(arena_stat_kind kind) noexcept {
  return kind == arena_stat_kind::active || kind == arena_stat_kind::active_bytes;
}

}  // namespace

std::int64_t stream_arena::active_now(arena_stat_kind kind, std::size_t pool) const noexcept {
  return counters_[static_cast<std::size_t>(base_of(kind))][pool].now() +
         counters_[static_cast<std::size_t>(kind)][pool].now();
}

void stream_arena::raise_active_peaks() noexcept {
  for (const arena_stat_kind kind : {arena_stat_kind::active, arena_stat_kind::active_bytes}) {
    auto& pair = counters_[static_cast<std::size_t>(kind)];
    const std::int64_t small = active_now(kind, 0);
    const std::int64_t large = active_now(kind, 1);
    if (small > pair[0].peak) {
      pair[0].peak = small;
      raise_device_peak(stat_index(kind, stat_pool::small_pool));
    }
    if (large > pair[1].peak) {
      pair[1].peak = large;
      raise_device_peak(stat_index(kind, stat_pool::large_pool));
    }
    if (small + large > all_peak_[static_cast<std::size_t>(kind)]) {
      all_peak_[static_cast<std::size_t>(kind)] = small + large;
      raise_device_peak(stat_index(kind, stat_pool::all));
    }
  }
}

std::int64_t stream_arena::current(std::size_t index) const noexcept {
  if (index == oversize_allocations_index) return oversize_.now();
  const auto kind = static_cast<arena_stat_kind>(index / stat_pool_count);
  const auto value = [&](std::size_t pool) {
    return is_derived(kind) ? active_now(kind, pool) : counters_[static_cast<std::size_t>(kind)][pool].now();
  };
  switch (static_cast<stat_pool>(index % stat_pool_count)) {
    case stat_pool::small_pool: return value(0);
    case stat_pool::large_pool: return value(1);
    case stat_pool::all: break;
  }
  return value(0) + value(1);
}

void stream_arena::reset_peaks() noexcept {
  for (std::size_t k = 0; k < arena_stat_kinds; ++k) {
    const auto kind = static_cast<arena_stat_kind>(k);
    for (std::size_t pool = 0; pool < 2; ++pool) {
      counters_[k][pool].peak = is_derived(kind) ? active_now(kind, pool) : counters_[k][pool].now();
    }
    all_peak_[k] = counters_[k][0].peak + counters_[k][1].peak;
  }
  oversize_.peak = oversize_.now();
}

void stream_arena::reset_accumulated() noexcept {
  for (auto& kind : counters_) {
    kind[0].reset_accumulated();
    kind[1].reset_accumulated();
  }
  oversize_.reset_accumulated();
}

}  // namespace streampool::native
