// streampool/pools.hpp — the private pools of one device of an allocator, as one object: the seam
// through which every pool operation reaches a backend (Note [Pool seam] in src/core/device_pools.cpp).
//
// allocator::pools(device) returns it; allocator's begin_allocate_to_pool, end_allocate_to_pool,
// release_pool, set_pool_options, get_pool_options and allocate_at call it. Public functions are
// non-virtual (they check their arguments), the backend implements the private do_* hooks. A new
// pool feature is a method here and a hook on this class, and nothing on `allocator`. Sleep and
// wake (docs/sleep-wake.md) are such a feature.
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "streampool/graph.hpp"

namespace streampool {

/// What sleep() does with the bytes of a pool's live allocations.
enum class sleep_mode : std::uint8_t {
  offload,  ///< copied to pinned host memory, and back at wake(): tensors read the same bytes
  discard,  ///< dropped: after wake() live allocations hold undefined bytes (a KV cache, activations)
};

struct STREAMPOOL_API sleep_options {
  sleep_mode mode = sleep_mode::offload;
  /// offload: keep the pinned host buffer after wake() for the next sleep (no pinning per cycle;
  /// it costs host memory while awake). wake() frees it otherwise.
  bool keep_backup = false;
  /// How far the copies run ahead of the unmapping (sleep) and behind the mapping (wake), in
  /// bytes of pages; 0: 256 MiB. Smaller windows start unmapping sooner and wait more often
  /// (Note [Sleep pipeline] in src/native/pool_sleep.cpp).
  std::size_t pipeline_bytes = 0;
};

/// Where a pool stands (device_pools::sleep_state).
struct STREAMPOOL_API pool_sleep_state {
  bool asleep = false;
  sleep_mode mode = sleep_mode::offload;  ///< of the current (or last) sleep
  std::size_t segments = 0;        ///< segments asleep
  std::size_t released_bytes = 0;  ///< device memory given back to the driver while asleep
  std::size_t held_bytes = 0;      ///< pages the driver refused to release: unmapped, still held
  std::size_t offloaded_bytes = 0; ///< live bytes copied to the host (offload)
  std::size_t backup_bytes = 0;    ///< pinned host bytes held for the backup (also while awake with keep_backup)
};

[[nodiscard]] STREAMPOOL_API const char* to_string(sleep_mode mode) noexcept;
/// {"asleep":...,"mode":"offload",...} with every field of `state` (C API, Python).
[[nodiscard]] STREAMPOOL_API std::string to_json(const pool_sleep_state& state);

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

  /// Puts `pool` ({0,0}: the default pool of this device) to sleep: once all queued work on its
  /// memory is done, its live bytes are copied to pinned host memory (offload) or dropped
  /// (discard), and its physical memory goes back to the device; the virtual addresses stay
  /// reserved. Allocating from a sleeping pool is an error; freeing is allowed. Needs VMM segments:
  /// expandable_segments:True for the default pool, pool_options::sleepable for a private pool.
  /// @throws error if the pool is unknown, already asleep, being captured into, holds a segment
  ///         that cannot be unmapped, or the backend cannot sleep (cudaMallocAsync); cuda_error /
  ///         out_of_memory when a copy or the host buffer fails. On a throw the pool is awake as
  ///         before (Note [Sleep all or nothing] in src/native/pool_sleep.cpp).
  void sleep(mempool_id pool, const sleep_options& options = {});
  /// Maps new physical memory at the pool's addresses and, for offload, copies its bytes back;
  /// returns when the memory is ready for any stream. @throws error if the pool is not asleep;
  /// out_of_memory when the device cannot back it now (the pool stays asleep, nothing lost)
  void wake(mempool_id pool);
  /// Whether `pool` ({0,0}: the default pool) sleeps, and what it holds. @throws error for an unknown pool
  [[nodiscard]] pool_sleep_state sleep_state(mempool_id pool) const;

 protected:
  explicit device_pools(int device) noexcept : device_(device) {}

 private:
  virtual void do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) = 0;
  virtual void do_end_allocate_to_pool(mempool_id pool) = 0;
  virtual void do_release_pool(mempool_id pool) = 0;
  virtual void do_set_options(mempool_id pool, const pool_options& options) = 0;
  [[nodiscard]] virtual pool_options do_options(mempool_id pool) const = 0;
  [[nodiscard]] virtual void* do_allocate_at(void* ptr, std::size_t bytes, mempool_id pool) = 0;
  virtual void do_sleep(mempool_id pool, const sleep_options& options) = 0;
  virtual void do_wake(mempool_id pool) = 0;
  [[nodiscard]] virtual pool_sleep_state do_sleep_state(mempool_id pool) const = 0;

  int device_;
};

}  // namespace streampool
