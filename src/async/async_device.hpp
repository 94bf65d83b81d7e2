// async_device.hpp — one device of the cudaMallocAsync backend: its stream-ordered pool (set up on
// construction), the statistics, the memory-fraction cap, the capture router (src/capture) and the
// allocate/free paths. All public members lock the device mutex; the pointer map and the trace ring
// are shared with the allocator and have their own locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "async/async_accounting.hpp"
#include "async/pointer_map.hpp"
#include "capture/capture_router.hpp"
#include "core/event_pool.hpp"
#include "core/hybrid_mutex.hpp"
#include "core/trace_ring.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/stats.hpp"

namespace streampool::async {

/// A deallocate() of an allocation made outside any capture, requested while a capture was
/// underway on its device: it is handed to free_async only once no capture is underway (Note
/// [Deferred frees during capture] in async_device.cpp).
struct deferred_free {
  void* ptr = nullptr;
  allocation_record record;
};

/// One block of a private pool: device memory of its own (cudaMalloc), never part of the
/// stream-ordered pool (Note [Private pools of the cudaMallocAsync backend] in
/// async_private_pool.cpp).
struct private_block {
  std::size_t size = 0;      ///< bytes obtained (the first request's footprint)
  stream_t stream = nullptr; ///< the stream it was allocated on: it is reused only on that stream
  bool idle = false;         ///< freed, waiting in the pool for a later allocation into the pool
};

/// The memory of one private pool: every block it owns, live or idle, and the idle ones by
/// (stream, size) for best fit.
struct private_memory {
  std::map<std::uintptr_t, private_block> blocks;
  std::multimap<std::pair<stream_t, std::size_t>, std::uintptr_t> idle;
  std::size_t bytes = 0;  ///< sum of blocks' sizes
  std::size_t live = 0;   ///< blocks handed out and not freed
};

/// The device's capture bookkeeping: private pools own blocks of their own (Note [Private pools of
/// the cudaMallocAsync backend]); parked frees are pointers with their records.
using capture_router = capture::capture_router<private_memory, deferred_free>;

class async_device {
 public:
  /// Sets up the pool of `device` (Note [Pool setup]).
  /// @throws error when the device has no memory-pool support; cuda_error when a pool call fails
  async_device(driver& drv, int device, const allocator_config& config, pointer_map& pointers,
               core::trace_ring& trace);
  ~async_device();
  async_device(const async_device&) = delete;
  async_device& operator=(const async_device&) = delete;

  /// malloc_async of `bytes` on `stream`, registered in the pointer map.
  /// @throws out_of_memory (cap or device exhausted after a trim and retry), cuda_error
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream);
  /// Frees an allocation already taken out of the pointer map. On an exception nothing changed and
  /// the caller puts the record back. @throws cuda_error
  void free(void* ptr, allocation_record& record);
  /// Device synchronise + trim the pool to 0, then gives back the idle blocks of released private
  /// pools and forgets those left empty (Note [Released pools]). Skipped while a capture is
  /// underway on the device.
  void empty_cache();

  [[nodiscard]] memory_stats stats();
  void reset_peak_stats();
  void reset_accumulated_stats();
  /// One one-block segment per live or deferred allocation of this device, unordered.
  void collect_segments(std::vector<segment_info>& out) const;
  /// Total active bytes (for the `snapshot` trace entry).
  [[nodiscard]] std::size_t active_bytes() const;

  void set_memory_fraction(double fraction);
  [[nodiscard]] double memory_fraction() const;

  void begin_allocate_to_pool(mempool_id pool, stream_filter filter);
  void end_allocate_to_pool(mempool_id pool);
  void release_pool(mempool_id pool);

  [[nodiscard]] mempool_t pool() const noexcept { return pool_; }
  [[nodiscard]] bool owns_pool() const noexcept { return owns_pool_; }

 private:
  /// Orders `record`'s free after its record_stream streams and issues free_async; accounts and
  /// traces free_completed. Throws (cuda_error) before changing anything.
  void release_locked(void* ptr, const allocation_record& record);
  /// Issues the deferred frees whose streams are no longer capturing (no capture underway).
  void flush_deferred_locked() noexcept;
  /// Gives back the idle blocks of released private pools and forgets the pools left without
  /// blocks (Note [Released pools]). The device must be synchronised and no capture underway.
  void forget_released_pools_locked();
  /// Makes `record.stream` wait for the work of its record_stream streams (Note [record_stream by
  /// stream wait]); returns true when the host had to synchronise instead. @throws cuda_error
  bool order_after_stream_uses_locked(void* ptr, const allocation_record& record);
  // Private pools (async_private_pool.cpp, Note [Private pools of the cudaMallocAsync backend]):
  /// An allocation of `bytes` on `stream` into `pool`: an idle block of the pool, else a new one.
  /// @throws out_of_memory, cuda_error, bad_alloc (nothing changed)
  [[nodiscard]] void* allocate_private_locked(capture_router::pool_type& pool, std::size_t bytes, stream_t stream);
  /// Takes `record`'s block back into its pool (idle). @throws cuda_error, bad_alloc (nothing changed)
  void free_private_locked(void* ptr, const allocation_record& record);
  /// The size of the private block at `address` of `pool` (0 when unknown).
  [[nodiscard]] std::size_t private_block_size(mempool_id pool, std::uintptr_t address) const noexcept;
  /// Gives the idle blocks of `pool` back to the device (cudaFree; no capture may be underway).
  void release_idle_blocks_locked(capture_router::pool_type& pool) noexcept;
  /// malloc_async; on out_of_memory (and no capture underway) synchronise, trim and retry once.
  [[nodiscard]] drv_result malloc_with_retry_locked(std::size_t bytes, stream_t stream, void** out);
  /// Device synchronise + pool_trim_to(0). False when the synchronise failed.
  bool synchronize_and_trim_locked() noexcept;
  /// Reads the pool's reserve into the statistics (status form: a failed read keeps the old value).
  void sample_reserved_locked() noexcept;
  [[nodiscard]] std::size_t limit_locked() const noexcept;
  /// Appends to the trace ring; a failure (host memory) drops the entry rather than undoing a
  /// completed allocate or free. Inline test first: the ring is off by default, and the hot path
  /// traces five times per pair.
  void trace(trace_action action, std::uintptr_t address, std::size_t size, stream_t stream,
             mempool_id pool) noexcept {
    if (trace_->enabled()) trace_enabled(action, address, size, stream, pool);
  }
  void trace_enabled(trace_action action, std::uintptr_t address, std::size_t size, stream_t stream,
                     mempool_id pool) noexcept;
  /// Builds the out_of_memory of a failed request, counts it and traces it (async_device_oom.cpp).
  /// Why a request failed: the driver said out of memory, the fraction cap refused it, or it is
  /// larger than the whole device (refused before the pool is asked; Note [Impossible requests]).
  enum class oom_cause : std::uint8_t { driver, cap, device_size };
  [[nodiscard]] out_of_memory oom_locked(std::size_t bytes, stream_t stream, mempool_id pool, oom_cause cause);

  driver* driver_;
  int device_;
  pointer_map* pointers_;
  core::trace_ring* trace_;
  mempool_t pool_ = nullptr;
  bool owns_pool_ = false;
  std::uint64_t previous_release_threshold_ = 0;  ///< of the default pool, restored at teardown
  std::size_t total_memory_ = 0;
  double fraction_ = 1.0;
  bool last_malloc_retried_ = false;  ///< set by malloc_with_retry_locked, read by oom_locked
  std::size_t private_bytes_ = 0;       ///< device memory held by private pools (live + idle blocks)
  std::size_t private_idle_bytes_ = 0;  ///< of which idle

  /// Held across the driver call of an allocate / free (Note [Hot path of the cudaMallocAsync backend]).
  mutable core::hybrid_mutex mutex_;
  async_accounting accounting_;
  capture_router captures_;
  core::event_pool events_;
};

}  // namespace streampool::async
