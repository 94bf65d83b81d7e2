// private_pools.cpp — private memory pools for graph capture (docs/pytorch-compatibility.md §3.1–§3.2): begin/end
// allocate-to-pool with stream filters (newest first), use counts, release, and the routing of an
// allocation to a pool arena. Memory of a released pool is returned by release_cached (release.cpp).
#include <algorithm>
#include <string>

#include "native/device_state.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {
namespace {

std::string pool_name(mempool_id id) {
  return "{" + std::to_string(id.first) + "," + std::to_string(id.second) + "}";
}

}  // namespace

void device_state::begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  std::lock_guard lock(mutex_);
  if (std::any_of(captures_.begin(), captures_.end(), [&](const capture_route& r) { return r.pool == pool; })) {
    throw error("streampool: begin_allocate_to_pool: already recording to pool " + pool_name(pool) + " on device " +
                std::to_string(index_) + "; call end_allocate_to_pool first");
  }
  captures_.reserve(captures_.size() + 1);
  auto it = pools_.find(pool);
  if (it != pools_.end()) {
    if (it->second->freeable()) {
      throw error("streampool: begin_allocate_to_pool: pool " + pool_name(pool) + " on device " +
                  std::to_string(index_) + " was released (use count 0); use a new id from create_pool_id()");
    }
    ++it->second->use_count;
  } else {
    auto created = std::make_unique<private_pool>();
    created->id = pool;
    pools_.emplace(pool, std::move(created));
  }
  captures_.push_back({pool, std::move(filter)});
  captures_underway.store(static_cast<std::uint32_t>(captures_.size()), std::memory_order_relaxed);
  (void)lock_arenas(nullptr);  // Note [Capture start] in native_allocator.hpp: drain the hot paths
}

void device_state::end_allocate_to_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(captures_.begin(), captures_.end(), [&](const capture_route& r) { return r.pool == pool; });
  if (it == captures_.end()) {
    throw error("streampool: end_allocate_to_pool: not currently recording to pool " + pool_name(pool) +
                " on device " + std::to_string(index_));
  }
  captures_.erase(it);
  captures_underway.store(static_cast<std::uint32_t>(captures_.size()), std::memory_order_relaxed);
}

void device_state::release_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) {
    throw error("streampool: release_pool: unknown pool " + pool_name(pool) + " on device " +
                std::to_string(index_) + " (never passed to begin_allocate_to_pool, or already freed)");
  }
  if (it->second->freeable()) {
    throw error("streampool: release_pool: pool " + pool_name(pool) + " on device " + std::to_string(index_) +
                " was already released (use count 0)");
  }
  --it->second->use_count;
}

int device_state::pool_use_count(mempool_id pool) const {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second->use_count;
}

stream_arena& device_state::route_locked(stream_t stream) {
  for (auto it = captures_.rbegin(); it != captures_.rend(); ++it) {
    if (it->filter(stream)) return pool_arena(*pools_.at(it->pool), stream);
  }
  return default_arena_locked(stream);
}

stream_arena& device_state::pool_arena(private_pool& pool, stream_t stream) {
  for (stream_arena* a : pool.arenas) {
    if (a->stream() == stream) return *a;
  }
  pool.arenas.reserve(pool.arenas.size() + 1);
  stream_arena& a = new_arena(stream, &pool, pool.id);
  pool.arenas.push_back(&a);
  return a;
}

}  // namespace streampool::native
