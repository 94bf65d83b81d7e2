// capture_arenas.cpp — the native backend's side of graph capture: the calls of
// begin/end_allocate_to_pool and release_pool on the device's capture router, the arenas of
// private pools (routing an allocation to one, recycling them when the pool dies) and the
// completion of frees the router parked. The bookkeeping itself (recordings, filters, use counts,
// the parking rule) is the router's: src/capture/capture_router.hpp.
#include <cstddef>
#include <unordered_set>
#include <utility>
#include <vector>

#include "native/device_state.hpp"

namespace streampool::native {

void device_state::begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  std::lock_guard lock(mutex_);
  (void)captures_.begin(pool, std::move(filter));
  (void)arenas_.lock_all(nullptr);  // Note [Capture start] in native_allocator.hpp: drain the hot paths
}

void device_state::end_allocate_to_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  captures_.end(pool);
}

void device_state::release_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  captures_.release(pool);  // the memory goes at the next release_cached (Note [Released pools])
}

void device_state::set_pool_options(mempool_id pool, const pool_options& options) {
  std::lock_guard lock(mutex_);
  // Read under the device mutex (a pool's arenas are only allocated from on the slow entry) and
  // under the arena's lock in alloc_found: both held here.
  const auto locks = arenas_.lock_all(nullptr);
  captures_.set_options(pool, options);
}

pool_options device_state::get_pool_options(mempool_id pool) const {
  std::lock_guard lock(mutex_);
  return captures_.options(pool);
}

int device_state::pool_use_count(mempool_id pool) const {
  std::lock_guard lock(mutex_);
  return captures_.use_count(pool);
}

stream_arena& device_state::route_locked(stream_t stream) {
  if (private_pool* pool = captures_.route(stream)) return pool_arena(*pool, stream);
  return default_arena_locked(stream);
}

void device_state::reuse_in_capture_locked(stream_t stream) {
  if (context_.reuse.load(std::memory_order_acquire) == nullptr) return;  // Note [Reuse within a capture]
  if (reuse_->empty()) {
    reuse_->reset_walks();
    return;
  }
  std::vector<const block*> candidates;
  captures_.for_each_deferred([&](block* b) {
    if (b->stream == stream) candidates.push_back(b);
  });
  if (candidates.empty()) return;
  const std::unordered_set<const block*> ready = reuse_->ready(stream, candidates);
  if (ready.empty()) return;
  const std::vector<block*> blocks = captures_.take_deferred_if([&](block* b) { return ready.count(b) != 0; });
  for (block* b : blocks) {
    reuse_->forget(b);
    const std::lock_guard lock(b->arena->mutex());
    b->uses.clear();  // ordered before the stream's next work by the graph
    b->arena->complete_deferred(b);  // no use left: back to its free list, no event
  }
}

stream_arena& device_state::pool_arena(private_pool& pool, stream_t stream) {
  std::vector<stream_arena*>& arenas = pool.memory.arenas;
  for (stream_arena* a : arenas) {
    if (a->stream() == stream) return *a;
  }
  arenas.reserve(arenas.size() + 1);
  stream_arena& a = arenas_.create(stream, &pool, pool.id);
  arenas.push_back(&a);
  return a;
}

// Note [Released pools] in src/capture/capture_router.cpp: a freeable pool whose arenas hold no
// segment is forgotten, and its arenas are recycled for later pools.
void device_state::delete_dead_pools() {
  captures_.forget_released([&](private_pool& pool) {
    for (stream_arena* a : pool.memory.arenas) {
      std::lock_guard lock(a->mutex());
      if (!a->empty()) return false;
    }
    arenas_.recycle(pool.memory.arenas);
    if (const auto kept = sleeps_.find(pool.id); kept != sleeps_.end()) {  // awake, with a kept backup
      source_.sleeper().drop_backup(kept->second);
      sleeps_.erase(kept);
    }
    return true;
  });
}

void device_state::process_deferred(const stream_arena* held) {
  if (!captures_.has_deferred()) return;
  std::vector<block*> parked = captures_.take_deferred();  // none while a capture is underway
  for (std::size_t i = 0; i < parked.size(); ++i) {
    block* b = parked[i];
    if (reuse_ != nullptr) reuse_->forget(b);  // Note [Reuse within a capture]
    std::unique_lock<arena_mutex> lock;
    if (b->arena != held) lock = std::unique_lock(b->arena->mutex());
    try {
      b->arena->complete_deferred(b);
    } catch (...) {
      // This block and the rest stay parked so nothing is lost; the caller reports the error. The
      // device mutex keeps captures from starting, so putting them back allocates nothing (unless
      // a free that saw the last capture just before it ended was parked meanwhile).
      parked.erase(parked.begin(), parked.begin() + static_cast<std::ptrdiff_t>(i));
      captures_.keep_deferred(std::move(parked));
      throw;
    }
  }
}

}  // namespace streampool::native
