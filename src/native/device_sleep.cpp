// device_sleep.cpp — sleep and wake of one device's pools in the native backend (docs/sleep-wake.md):
// which arenas a pool has, the rules of when a pool may sleep, the refusal of allocations while it
// sleeps, and the records kept per pool. The pages and copies themselves are pool_sleeper's
// (pool_sleep.cpp).
#include <mutex>
#include <string>

#include "core/format.hpp"
#include "native/device_state.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {
namespace {

std::string pool_name(mempool_id pool) {
  if (pool.is_default()) return "the default pool";
  return "private pool {" + std::to_string(pool.first) + ", " + std::to_string(pool.second) + "}";
}

}  // namespace

// Note [Refused while asleep]
// Allocating from a sleeping pool is an error, not an out-of-memory: the memory is the pool's, it
// is only not there. The cache-hit path pays nothing for it: a private pool is only reached
// through the slow entry (routing), where route_locked asks; while the default pool sleeps, it
// holds the capture router's slow-entry word (capture_router::hold, Note [Slow-entry word] in
// src/capture/capture_router.hpp), so needs_slow_entry() is true with no load of its own and every
// allocation of the device takes the slow entry, which asks too. A racing allocation that read the
// word before sleep set the hold re-reads it under its arena's lock, which sleep held while it set
// it; wake releases the hold, also under every arena lock of the pool.
// Freeing is allowed while asleep (it touches no device memory): the block joins its free list and
// is mapped again with the rest at wake. empty_cache leaves a sleeping pool's arenas alone, and a
// use_on_oom pool that sleeps lends nothing.
void device_state::check_awake_locked(mempool_id pool, std::size_t requested) const {
  if (!pool_asleep_locked(pool)) return;
  throw error("streampool: allocation of " + format_size(requested) + " on device " + std::to_string(index_) +
              " from " + pool_name(pool) + ", which is asleep (sleep() gave its memory back to the device); call "
              "wake() on it first, or allocate from another pool");
}

bool device_state::pool_asleep_locked(mempool_id pool) const {
  const auto found = sleeps_.find(pool);
  return found != sleeps_.end() && found->second.asleep;
}

std::vector<stream_arena*> device_state::pool_arenas_locked(mempool_id pool, const char* what) const {
  if (pool.is_default()) return arenas_.default_pool();
  const private_pool* p = captures_.find(pool);
  if (p == nullptr) {
    throw error(std::string("streampool: ") + what + ": " + pool_name(pool) + " is unknown on device " +
                std::to_string(index_) + " (no begin_allocate_to_pool made it, or it was released and freed)");
  }
  return p->memory.arenas;
}

void device_state::sleep_pool(mempool_id pool, const sleep_options& options) {
  std::lock_guard lock(mutex_);
  std::vector<stream_arena*> arenas = pool_arenas_locked(pool, "sleep");
  if (pool_asleep_locked(pool)) {
    throw error("streampool: sleep: " + pool_name(pool) + " on device " + std::to_string(index_) +
                " is already asleep; wake() it first");
  }
  if (capture_underway()) {
    throw error("streampool: sleep: a CUDA graph capture (or a begin_allocate_to_pool) is underway on device " +
                std::to_string(index_) + "; unmapping memory then is illegal. Sleep after the capture ends");
  }
  if (pool.is_default() && arenas_.shared() != nullptr) {
    throw error("streampool: sleep: the default pool of device " + std::to_string(index_) +
                " shares its free memory across streams (cross_stream_reuse:True), whose page moves keep old "
                "mappings alive; it cannot sleep. Put what should sleep in a private pool (pool_options::sleepable)");
  }
  process_deferred(nullptr);
  std::vector<std::unique_lock<arena_mutex>> locks;
  locks.reserve(arenas.size());
  for (stream_arena* a : arenas) locks.emplace_back(a->mutex());
  sleep_record& rec = sleeps_[pool];
  try {
    source_.sleeper().sleep(rec, arenas, pool, options);
  } catch (...) {
    if (!rec.asleep && rec.backup == nullptr) sleeps_.erase(pool);
    throw;
  }
  if (pool.is_default()) captures_.hold();  // under the arena locks (Note [Refused while asleep])
}

void device_state::wake_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  const std::vector<stream_arena*> arenas = pool_arenas_locked(pool, "wake");
  const auto found = sleeps_.find(pool);
  if (found == sleeps_.end() || !found->second.asleep) {
    throw error("streampool: wake: " + pool_name(pool) + " on device " + std::to_string(index_) +
                " is not asleep; nothing to wake");
  }
  std::vector<std::unique_lock<arena_mutex>> locks;
  locks.reserve(arenas.size());
  for (stream_arena* a : arenas) locks.emplace_back(a->mutex());
  source_.sleeper().wake(found->second, pool);
  if (found->second.backup == nullptr) sleeps_.erase(found);
  if (pool.is_default()) captures_.release_hold();
}

pool_sleep_state device_state::sleep_state(mempool_id pool) const {
  std::lock_guard lock(mutex_);
  (void)pool_arenas_locked(pool, "sleep_state");
  const auto found = sleeps_.find(pool);
  return found == sleeps_.end() ? pool_sleep_state{} : found->second.state();
}

}  // namespace streampool::native
