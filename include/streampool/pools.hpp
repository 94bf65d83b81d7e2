// streampool/pools.hpp — the private pools of one device of an allocator, as one object: the seam
// through which every pool operation reaches a backend (Note [Pool seam] in src/core/device_pools.cpp).
//
// allocator::pools(device) returns it; allocator's begin_allocate_to_pool, end_allocate_to_pool,
// release_pool, set_pool_options, get_pool_options and allocate_at call it. Public functions are
// non-virtual (they check their arguments), the backend implements the private do_* hooks. A new
// pool feature is a method here and a hook on this class, and nothing on `allocator`.
#pragma once

#include "streampool/export.h"

#include <cstddef>

#include "streampool/graph.hpp"

namespace streampool {

class STREAMPOOL_API device_pools {
 public:
  virtual ~device_pools();
  device_pools(const device_pools&) = delete;
  device_pools& operator=(const device_pools&) = delete;

  /// The device these pools belong to.
  [[nodiscard]] int device() const noexcept { return device_; }

  /// Routes allocations whose stream satisfies `filter` to private pool `pool` (created on first
  /// use; a further begin on an existing pool adds a use).
  /// @throws error if `pool` is the default id, the filter is empty, or `pool` is being recorded to
  void begin_allocate_to_pool(mempool_id pool, stream_filter filter);
  /// Stops routing to `pool`. @throws error if it is not being recorded to.
  void end_allocate_to_pool(mempool_id pool);
  /// Drops one use of `pool`; at zero its free memory is released by the next empty_cache().
  /// @throws error for the default id
  void release_pool(mempool_id pool);
  /// Sets the options of `pool` (Note [Pool options] in src/core/allocator.cpp).
  /// @throws error for the default id or a pool unknown on this device
  void set_options(mempool_id pool, const pool_options& options);
  /// The options of `pool`. @throws error for the default id or a pool unknown on this device
  [[nodiscard]] pool_options options(mempool_id pool) const;
  /// Allocates exactly [ptr, ptr + bytes) of `pool` (allocator::allocate_at).
  /// @throws error for a bad range, memory that is not free memory of `pool`, or a backend that
  ///         cannot place an allocation (nothing changed)
  [[nodiscard]] void* allocate_at(void* ptr, std::size_t bytes, mempool_id pool);

 protected:
  explicit device_pools(int device) noexcept : device_(device) {}

 private:
  virtual void do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) = 0;
  virtual void do_end_allocate_to_pool(mempool_id pool) = 0;
  virtual void do_release_pool(mempool_id pool) = 0;
  virtual void do_set_options(mempool_id pool, const pool_options& options) = 0;
  [[nodiscard]] virtual pool_options do_options(mempool_id pool) const = 0;
  [[nodiscard]] virtual void* do_allocate_at(void* ptr, std::size_t bytes, mempool_id pool) = 0;

  int device_;
};

}  // namespace streampool
