// oom_ladder.cpp — an allocation that found no free block (docs/pytorch-compatibility.md §2.3 steps 4–5): garbage
// collection, a new segment (or expandable growth), release of oversize blocks, release of
// everything cached and a retry, and finally the out-of-memory error with the figures of Note
// [OOM message] (plus Note [OOM during capture] when a capture is underway). Also empty_cache,
// the same release of everything cached (docs/pytorch-compatibility.md §2.12), which ends with the deletion of dead private
// pools (capture_arenas.cpp).
// The segment source carries each step out; this file decides the order and holds the locks.
#include <algorithm>
#include <string>

#include "core/format.hpp"
#include "core/oom_message.hpp"
#include "native/device_state.hpp"
#include "native/native_report.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

block* device_state::allocate_slow(stream_arena& a, std::size_t rounded, std::size_t requested, stream_t stream) {
  const bool small = size_policy::is_small(rounded);
  // Note [Deferred frees during capture]: while a capture is underway nothing may cudaFree or
  // query/synchronise events, so the steps that release memory are skipped (PyTorch skips only
  // the last one; its GC and oversize release would call cudaFree during the capture).
  const bool capture = capture_underway();
  if (!capture && context_.gc_enabled.load(std::memory_order_relaxed)) {
    if (const std::size_t target = source_.gc_target(); target != 0) {  // docs/pytorch-compatibility.md §2.11
      auto locks = arenas_.lock_all(&a);
      source_.garbage_collect(arenas_.all(), target);
    }
  }
  // grow(): a new segment, or expandable growth (Note [Expandable segments] in expandable.hpp).
  block* b = source_.grow(a, rounded, small);
  if (b == nullptr && !capture && !small && context_.policy->max_split_set() && source_.release_available(a, rounded)) {
    b = source_.grow(a, rounded, small);
  }
  if (b == nullptr && !capture) {
    release_cached(&a);
    ++counters_.num_alloc_retries;
    b = source_.grow(a, rounded, small);
  }
  if (b != nullptr && a.order() != nullptr && !a.order_growth(b, stream)) {
    b = source_.grow(a, rounded, small, /*fresh=*/true);  // Note [Growth next to another stream's free block]
  }
  if (b == nullptr) {
    if (block* borrowed = borrow_on_oom(a, rounded, requested, stream)) return borrowed;  // Note [Pool options]
    throw_oom(a, requested, rounded, context_.policy->allocation_size(rounded));
  }
  return a.allocate_block(b, rounded, requested, stream);
}

block* device_state::borrow_on_oom(const stream_arena& a, std::size_t rounded, std::size_t requested,
                                   stream_t stream) {
  // Note [Pool options] in src/core/allocator.cpp: the last step before an OOM, for allocations of
  // the general pools only (one routed to a pool fails with its pool). A pool that is released, or
  // being recorded to (its free blocks may be the capture's), is not asked.
  if (a.pool() != nullptr) return nullptr;
  return captures_.first_use_on_oom([&](private_pool& pool) -> block* {
    if (pool_asleep_locked(pool.id)) return nullptr;  // Note [Refused while asleep]
    for (stream_arena* pool_arena : pool.memory.arenas) {
      if (pool_arena->stream() != stream) continue;
      std::lock_guard lock(pool_arena->mutex());
      return pool_arena->try_allocate(rounded, requested, stream);  // a free block only, no new memory
    }
    return nullptr;
  });
}

void device_state::release_cached(const stream_arena* held) {
  process_deferred(held);
  ++counters_.num_sync_all_streams;
  arenas_.synchronize_events(held);
  source_.release_leftovers();  // Note [Leftover pages] in leftover_pages.hpp
  for (auto& a : arenas_.all()) {
    std::unique_lock<arena_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->pool() != nullptr && !a->pool()->freeable()) continue;
    if (pool_sleeper::asleep(*a)) continue;  // its pages are not there (Note [Refused while asleep])
    source_.release_free(*a);
  }
  delete_dead_pools();
}

bool device_state::empty_cache() {
  std::lock_guard lock(mutex_);
  // Note [Deferred frees during capture]: no event sync or cudaFree while a capture is underway.
  if (capture_underway()) return false;
  release_cached(nullptr);
  return true;
}

void device_state::throw_oom(stream_arena& a, std::size_t requested, std::size_t rounded, std::size_t alloc_size) {
  core::oom_figures f;
  driver& drv = *context_.drv;
  f.device = index_;
  f.requested = requested;
  f.alloc_size = alloc_size;
  if (!drv.mem_get_info(index_, &f.device_free, &f.device_total).ok()) {
    f.device_free = 0;
    f.device_total = source_.known_total_memory();
  }
  f.allowed = source_.allowed_bytes();
  f.cap_set = source_.fraction() < 1.0;  // Note [A cap of 0 bytes] in src/core/oom_message.cpp
  f.reserved = source_.counters().reserved();
  f.expandable_segments = context_.config->expandable_segments;
  f.max_split_size_set = context_.policy->max_split_set();
  f.backend = "native";
  {
    auto locks = arenas_.lock_all(&a);
    add_arena_figures(arenas_.all(), f);
  }
  context_.trace.record(trace_action::oom, index_, f.device_free, rounded, a.stream(), a.pool_id());
  ++counters_.num_ooms;
  std::string message = core::build_oom_message(f);
  if (capture_underway()) message += capture_oom_note(index_, a);
  if (a.pool() != nullptr && a.pool()->options.provider != nullptr) {
    message += core::provider_oom_note(a.pool_id(), *a.pool()->options.provider);  // Note [Pool options]
  }
  throw out_of_memory(std::move(message), requested, index_);
}

}  // namespace streampool::native
