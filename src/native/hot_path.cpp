// hot_path.cpp — everything a cache hit executes, in one translation unit so that the compiler
// inlines it into two functions: native_allocator::do_allocate (rounding, arena lookup, the front
// block, statistics) and do_deallocate (segment map, live blocks, parking the front block,
// statistics), docs/pytorch-compatibility.md §2.4–§2.8; and the plain path behind them (best
// fit, split, merge). See Note [Hot path layout] and Note [Front block] (front_block.hpp).
#include <string>

#include "native/device_state.hpp"
#include "native/native_allocator.hpp"
#include "native/stream_arena.hpp"

namespace streampool::native {

// Note [Hot path layout]
// (Written before Note [Front block] and Note [Newest live block] took the common pair off the
// plain path; what it says holds for the plain path, which a miss of the front block runs.)
// A cache-hit pair was about 800 instructions; a call between translation units costs 15–20 of
// them (register saves and restores, the call, and no inlining across it), and the pair used to
// make six such calls (allocator -> arena -> best fit -> split, free -> merge). So the functions of
// the hit path live here together: alloc_found and free_block are always inlined (their cold
// callers elsewhere go through allocate_block and complete_pending), and try_allocate and
// free_request are inlined into do_allocate and do_deallocate. The slow entry, events and
// deferred frees stay in native_allocator.cpp, event_queues.cpp and stream_arena.cpp; the hot
// statistics are inline in arena_stats.hpp, the block store's best fit, split and merge in
// block_store.hpp, and the arena reaches its device's policy, trace and counters through one
// pointer (device_context), as it did when they were device_state's.

// --- stream_arena ------------------------------------------------------------------------------------

inline block* stream_arena::alloc_found(block* b, std::size_t rounded, std::size_t requested, stream_t stream) {
  // reserve_blocks() ran before: the split below finds a block object.
  const segment* seg = b->seg;
  const bool small = seg->small;
  const bool counts_split = !seg->expandable;  // inactive_split ignores expandable blocks (§2.14)
  const bool was_split = b->is_split();
  // Note [Pool options]: a no_split pool hands its blocks out whole.
  if (device_->policy->should_split(small || seg->expandable, b->size, rounded) &&
      (pool_ == nullptr || !pool_->options.no_split)) {
    const block* rest = blocks_.split(b, rounded);  // Note [Cross-stream reuse]: the rest is still free
    if (counts_split && was_split) {
      stats_.sub(arena_stat_kind::inactive_split_bytes, small, static_cast<std::int64_t>(rounded));
    } else if (counts_split) {
      stats_.add(arena_stat_kind::inactive_split, small, 1);
      stats_.add(arena_stat_kind::inactive_split_bytes, small, static_cast<std::int64_t>(rest->size));
    }
  } else if (was_split && counts_split) {
    stats_.sub(arena_stat_kind::inactive_split, small, 1);
    stats_.sub(arena_stat_kind::inactive_split_bytes, small, static_cast<std::int64_t>(b->size));
  }
  b->allocated = true;
  b->requested_size = requested;
  b->stream = stream;
  b->hazard_streams = 0;
  const auto size = static_cast<std::int64_t>(b->size);
  stats_.add(arena_stat_kind::allocation, small, 1);
  stats_.add(arena_stat_kind::allocated_bytes, small, size);
  // Active is derived; with frees pending it may pass its peak here (Note [Derived active
  // counters]); and the arena joins the device's changed arenas (Note [Device totals]).
  stats_.after_allocation();
  stats_.add(arena_stat_kind::requested_bytes, small, static_cast<std::int64_t>(requested));
  if (device_->policy->is_oversize(b->size)) [[unlikely]] stats_.change_oversize(1);
  live_.add(b);
  device_->trace.record(trace_action::alloc, device_->index, b->ptr, requested, stream, pool_id_);
  return b;
}

inline void stream_arena::free_block(block* b) {
  device_->trace.record(trace_action::free_completed, device_->index, b->ptr, b->requested_size, b->stream,
                          pool_id_);
  if (stats_.free_flags() != 0) [[unlikely]] free_block_flags(b);  // one check for all (Note [Device totals])
  settle();  // its callers took the lock through arena_mutex, which settled; a no-op check
  merge_and_insert(b);
}

inline void stream_arena::merge_and_insert(block* b) {
  const bool small = b->seg->small;
  const auto requested = static_cast<std::int64_t>(b->requested_size);
  const auto unmerged = static_cast<std::int64_t>(b->size);
  // Merge with free neighbours (docs/pytorch-compatibility.md §2.8); each was a split block.
  std::int64_t split_blocks = -blocks_.merge_free_neighbours(b);
  std::int64_t split_bytes = unmerged - static_cast<std::int64_t>(b->size);
  b->requested_size = 0;
  blocks_.insert_free(b);
  if (b->is_split()) {
    ++split_blocks;
    split_bytes += static_cast<std::int64_t>(b->size);
  }
  if (!b->seg->expandable) {  // inactive_split ignores expandable blocks (docs/pytorch-compatibility.md §2.14)
    if (split_blocks != 0) stats_.change(arena_stat_kind::inactive_split, small, split_blocks);
    if (split_bytes != 0) stats_.change(arena_stat_kind::inactive_split_bytes, small, split_bytes);
  }
  // Active falls with allocation (free_request) or with pending (complete_pending).
  stats_.sub(arena_stat_kind::requested_bytes, small, requested);
}

// --- the front block (Note [Front block] in front_block.hpp) --------------------------------------------

inline void stream_arena::park_or_free(block* b) {
  // Traced by free_request; the counters not yet changed: a parked block's free is the parked
  // state (Note [Front block counters]). No front block yet and none of the free's rare cases
  // (one check for all, Note [Device totals]).
  if (front_.parked() == nullptr && stats_.free_flags() == 0 && front_.park(b)) [[likely]] return;
  free_unparked(b);
}

void stream_arena::free_unparked(block* b) {
  settle();  // an earlier front block goes back first
  if (stats_.free_flags() == 0 && front_.park(b)) return;
  free_counts(b);
  if (stats_.free_flags() != 0) free_block_flags(b);  // no parking then
  merge_and_insert(b);
}

inline void stream_arena::free_counts(block* b) noexcept {
  const bool small = b->seg->small;
  const auto size = static_cast<std::int64_t>(b->size);
  stats_.sub(arena_stat_kind::allocation, small, 1);
  stats_.sub(arena_stat_kind::allocated_bytes, small, size);
  if (device_->policy->is_oversize(b->size)) [[unlikely]] stats_.change_oversize(-1);
}

inline block* stream_arena::take_front(std::size_t rounded, std::size_t requested, stream_t stream) {
  // History on: the plain path hands the same block out and traces it (Note [Hot free]).
  if (front_.parked() == nullptr || device_->trace.enabled()) return nullptr;
  live_.reserve_one();  // may throw: nothing changed yet
  block* b = front_.take(rounded, requested, stream);
  if (b == nullptr) return nullptr;
  live_.add(b);  // no trace entry: history is off, and a segment listener hears segment events only
  return b;
}

// --- the plain allocation ------------------------------------------------------------------------------

inline block* stream_arena::try_allocate_inline(std::size_t rounded, std::size_t requested, stream_t stream) {
  block* b = nullptr;
  if (size_policy::is_small(rounded)) {
    b = blocks_.best_fit_small(rounded);
    if (b == nullptr && order_ != nullptr) [[unlikely]] b = partial_page_fit(rounded);
  } else {
    if (device_->gc_enabled.load(std::memory_order_relaxed)) {
      device_->gc_clock.fetch_add(1, std::memory_order_relaxed);  // docs/pytorch-compatibility.md §2.6
    }
    b = blocks_.best_fit_large(rounded);
    if (b != nullptr && !device_->policy->may_reuse(b->size, rounded)) b = nullptr;
  }
  if (b == nullptr) return nullptr;
  reserve_blocks();
  if (b->hazard_streams != 0 && (b->hazard_streams & ~order_->bit(stream)) != 0 &&
      !order_->order_after(b->hazard_streams, b->hazard_ticket, stream)) [[unlikely]] {
    return nullptr;  // Note [Cross-stream reuse]: not during a capture; new memory instead
  }
  blocks_.remove_free(b);
  return alloc_found(b, rounded, requested, stream);
}

block* stream_arena::try_allocate(std::size_t rounded, std::size_t requested, stream_t stream) {
  return try_allocate_inline(rounded, requested, stream);
}

block* stream_arena::allocate_block(block* b, std::size_t rounded, std::size_t requested, stream_t stream) {
  return alloc_found(b, rounded, requested, stream);
}

// --- free -----------------------------------------------------------------------------------------

inline void stream_arena::free_request(block* b) {
  if (!b->uses.empty()) [[unlikely]] {  // events or a capture to wait for: out of line
    free_request_used(b);
    return;
  }
  // free_request_used's path for a block without uses (no event is recorded for it); its
  // counters: park_or_free's.
  if (device_->trace.enabled()) [[unlikely]] {
    device_->trace.record(trace_action::free_requested, device_->index, b->ptr, b->requested_size, b->stream,
                          pool_id_);
    device_->trace.record(trace_action::free_completed, device_->index, b->ptr, b->requested_size, b->stream,
                          pool_id_);
  }
  b->allocated = false;
  park_or_free(b);
}

void stream_arena::free_request_used(block* b) {
  // Note [Failed frees]: events first, so that a failure leaves the block allocated.
  if (!b->uses.empty() && !device_->capture_underway()) [[unlikely]] {
    try {
      events_.record(b);
    } catch (...) {
      live_.put_back(b);  // back where take_live found it (its place is still free: no allocation)
      throw;
    }
  }
  const bool completes = b->event_count == 0 && b->uses.empty();
  if (device_->trace.enabled()) [[unlikely]] {  // one check for both entries of a free that completes
    device_->trace.record(trace_action::free_requested, device_->index, b->ptr, b->requested_size, b->stream,
                          pool_id_);
    if (completes) {
      device_->trace.record(trace_action::free_completed, device_->index, b->ptr, b->requested_size, b->stream,
                            pool_id_);
    }
  }
  b->allocated = false;
  if (completes) {  // no event to wait for after all (park_or_free counts the free)
    park_or_free(b);
    return;
  }
  free_counts(b);
  stats_.change_pending(b->seg->small, 1, static_cast<std::int64_t>(b->size));  // still active (Note [Derived active counters])
  if (b->event_count != 0) return;  // waits for the events recorded above
  {
    // Note [Deferred frees during capture] in native_allocator.hpp.
    device_->captures->defer(b);
    b->deferred = true;
    // Note [Reuse within a capture] (capture_reuse.hpp): where the graph stands on its streams.
    if (pool_ != nullptr) {
      if (capture_reuse* reuse = device_->reuse.load(std::memory_order_acquire)) reuse->note_free(b);
    }
  }
}

void stream_arena::free_block_flags(block* b) {
  stats_.changed();
  if (order_ != nullptr) {  // Note [Cross-stream reuse]: the uses so far were on b->stream
    b->hazard_streams = order_->note_free(b->stream, b->hazard_ticket);
  }
}

void stream_arena::complete_pending(block* b) {
  settle();  // Note [Front block]
  stats_.change_pending(b->seg->small, -1, -static_cast<std::int64_t>(b->size));
  free_block(b);
}

// --- native_allocator ------------------------------------------------------------------------------

void* native_allocator::do_allocate(int device, std::size_t bytes, stream_t stream) {
  device_state& d = *devices_[static_cast<std::size_t>(device)];
  const std::size_t rounded = policy_.round_size(bytes);
  // The front block (Note [Front block]): under the raw lock, no settle; a miss changes nothing.
  if (!d.needs_slow_entry()) [[likely]] {
    if (stream_arena* a = d.find_default_arena(stream)) [[likely]] {
      block* b = nullptr;
      {
        std::lock_guard lock(a->hot_mutex());
        // Checked again under the lock: see Note [Capture start]. Pending events: the plain path.
        if (!d.needs_slow_entry() && !a->has_pending_events()) [[likely]] b = a->take_front(rounded, bytes, stream);
      }
      if (b != nullptr) [[likely]] return reinterpret_cast<void*>(b->ptr);
    }
  }
  return allocate_plain(d, rounded, bytes, stream);
}

void* native_allocator::allocate_plain(device_state& d, std::size_t rounded, std::size_t bytes, stream_t stream) {
  block* b = nullptr;
  if (!d.needs_slow_entry()) [[likely]] {
    stream_arena* a = d.find_default_arena(stream);
    if (a == nullptr) [[unlikely]] a = &d.default_arena(stream);
    {
      std::lock_guard lock(a->mutex());  // settles the front block
      // Checked again under the lock: see Note [Capture start].
      if (!d.needs_slow_entry()) [[likely]] {
        // Polls only this arena's events, and only when it has some: no driver call otherwise.
        if (a->has_pending_events()) a->process_events();
        b = a->try_allocate_inline(rounded, bytes, stream);
      }
    }
    if (b == nullptr) b = allocate_slow_entry(d, stream, rounded, bytes);
  } else {
    b = allocate_slow_entry(d, stream, rounded, bytes);
  }
  return reinterpret_cast<void*>(b->ptr);
}

void native_allocator::do_deallocate(void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (stream_arena* a = segments_.find(address)) [[likely]] {
    std::lock_guard lock(a->hot_mutex());  // no settle: the hot free parks only when nothing is parked
    if (a->free_newest(address)) [[likely]] return;
  }
  deallocate_plain(ptr);
}

void native_allocator::deallocate_plain(void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (stream_arena* a = segments_.find(address)) [[likely]] {
    std::lock_guard lock(a->hot_mutex());  // no settle: free_request settles where it must
    if (block* b = a->take_live(address)) [[likely]] {
      a->free_request(b);
      return;
    }
  }
  bad_pointer("deallocate", ptr);
}

}  // namespace streampool::native
