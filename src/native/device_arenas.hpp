// device_arenas.hpp — every arena of one device: the lock-free stream → default-pool arena table,
// creating arenas (a stream's default-pool arena on first use, a private pool's per stream), the
// shared arena and its stream order (cross_stream_reuse:True), recycling the arenas of dead
// private pools, and what is done to all of them at once (locking them, their events). Which arena
// an allocation goes to during a capture, and when a pool dies, are device_state's; device mutex
// held for everything but find_default.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "native/arena_table.hpp"
#include "native/device_context.hpp"
#include "native/stream_arena.hpp"
#include "native/stream_order.hpp"
#include "streampool/driver.hpp"
#include "streampool/graph.hpp"

namespace streampool::native {

class device_arenas {
 public:
  explicit device_arenas(device_context& context) noexcept : context_(&context) {}
  device_arenas(const device_arenas&) = delete;
  device_arenas& operator=(const device_arenas&) = delete;

  /// The default-pool arena of `stream`, or nullptr before its first allocation (no lock).
  [[nodiscard]] stream_arena* find_default(stream_t stream) const noexcept { return table_.find(stream); }
  /// find_default, creating the arena on first use of `stream`.
  [[nodiscard]] stream_arena& default_arena(stream_t stream);
  /// A new arena (a recycled one when there is one), for `pool` (nullptr: the default pool).
  [[nodiscard]] stream_arena& create(stream_t stream, private_pool* pool, mempool_id pool_id);
  /// The arenas of a dead private pool, all empty, become spares for later pools.
  void recycle(const std::vector<stream_arena*>& arenas);

  /// Locks every arena except `held` (already locked by the caller).
  [[nodiscard]] std::vector<std::unique_lock<arena_mutex>> lock_all(const stream_arena* held);
  /// Polls the outstanding events of every arena.
  void process_events(const stream_arena* held);
  /// Waits for the outstanding events of every arena.
  void synchronize_events(const stream_arena* held);

  /// The default pool's arenas (every arena without a private pool that is not a spare).
  [[nodiscard]] std::vector<stream_arena*> default_pool() const;
  /// Every arena ever created (their owner).
  [[nodiscard]] const std::vector<std::unique_ptr<stream_arena>>& all() const noexcept { return arenas_; }
  /// cross_stream_reuse:True, once its first stream allocated: the default pool's shared arena and
  /// its stream order (Note [Cross-stream reuse]); nullptr otherwise.
  [[nodiscard]] stream_arena* shared() const noexcept { return shared_; }
  [[nodiscard]] stream_order* order() const noexcept { return order_.get(); }

 private:
  /// The shared default-pool arena, with `stream` added to its order; nullptr when its 64 streams
  /// are taken (Note [Cross-stream reuse]).
  [[nodiscard]] stream_arena* shared_arena(stream_t stream);

  device_context* context_;
  arena_table table_;
  std::unique_ptr<stream_order> order_;  // cross_stream_reuse:True only
  stream_arena* shared_ = nullptr;       // the default pool's shared arena, when order_ is set
  std::vector<std::unique_ptr<stream_arena>> arenas_;  // owner of every arena ever created
  std::vector<stream_arena*> spare_arenas_;            // arenas of deleted private pools
};

}  // namespace streampool::native
