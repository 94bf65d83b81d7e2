// async_device.hpp — one device of the cudaMallocAsync backend: the allocate / free paths (the
// stream-ordered pool, or a private pool's blocks while a recording routes the stream), frees
// deferred during a capture, empty_cache, teardown, and the entry points for statistics,
// snapshots, the fraction cap and captures. It owns its parts: the pool (stream_ordered_pool), the
// private pools' blocks (private_pools), the capture router (async_captures.hpp), the record_stream
// ordering, the cap, the accounting and the OOM report. All public members lock the device mutex;
// the pointer map and the trace ring are shared with the allocator and have their own locks.
#pragma once

#include <cstddef>
#include <vector>

#include "async/async_accounting.hpp"
#include "async/async_captures.hpp"
#include "async/device_trace.hpp"
#include "core/memory_cap.hpp"
#include "async/oom_reporter.hpp"
#include "async/pointer_map.hpp"
#include "async/private_pools.hpp"
#include "async/record_stream_order.hpp"
#include "async/stream_ordered_pool.hpp"
#include "core/hybrid_mutex.hpp"
#include "core/trace_ring.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/stats.hpp"

namespace streampool::async {

class async_device {
 public:
  /// Sets up the pool of `device` (Note [Pool setup] in stream_ordered_pool.cpp).
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
  void set_pool_options(mempool_id pool, const pool_options& options);
  [[nodiscard]] pool_options get_pool_options(mempool_id pool) const;

  /// A capture is underway on the device (no lock: the router's count is atomic).
  [[nodiscard]] bool capture_underway() const noexcept { return captures_.underway(); }

  /// The device's cudaMemPool (tests read its attributes).
  [[nodiscard]] mempool_t pool() const noexcept { return pool_.handle(); }

 private:
  /// An allocation of `bytes` on `stream` into the private pool `pool`: an idle block of the pool,
  /// else a new one. @throws out_of_memory, cuda_error, bad_alloc (nothing changed)
  [[nodiscard]] void* allocate_private_locked(private_pool& pool, std::size_t bytes, stream_t stream);
  /// Orders `record`'s free after its record_stream streams and issues free_async; accounts and
  /// traces free_completed. Throws (cuda_error) before changing anything.
  void release_locked(void* ptr, const allocation_record& record);
  /// Issues the deferred frees whose streams are no longer capturing (no capture underway).
  void flush_deferred_locked() noexcept;
  /// Gives back the idle blocks of released private pools and forgets the pools left without
  /// blocks (Note [Released pools]). The device must be synchronised and no capture underway.
  void forget_released_pools_locked();
  /// malloc_async; on out_of_memory (and no capture underway) synchronise, trim and retry once.
  [[nodiscard]] drv_result malloc_with_retry_locked(std::size_t bytes, stream_t stream, void** out);
  /// Device synchronise + pool_trim_to(0). False when the synchronise failed.
  bool synchronize_and_trim_locked() noexcept;
  /// The cap refused `more` bytes: gives back the idle blocks of released private pools (when
  /// there are any and no capture is underway) and says whether the cap takes them now (Note
  /// [Cap refusals give back released pools first] in async_device.cpp).
  [[nodiscard]] bool cap_allows_after_release_locked(std::size_t more) noexcept;
  /// Reads the reserve (the pool's and the private pools' blocks) into the statistics.
  void sample_reserved_locked() noexcept { pool_.sample_reserved(accounting_, private_pools_.bytes()); }
  /// Bytes the fraction cap compares (Note [Memory fraction] in memory_cap.cpp): allocations not
  /// yet handed back to the pool, and idle private blocks.
  [[nodiscard]] std::size_t held_bytes_locked() const noexcept {
    return accounting_.held_bytes() + private_pools_.idle_bytes();
  }
  /// The out_of_memory of a failed request, counted and traced (oom_reporter).
  [[nodiscard]] out_of_memory oom_locked(std::size_t bytes, stream_t stream, mempool_id pool, oom_cause cause);
  /// A general allocation's last chance before its OOM: an idle block of a use_on_oom pool, handed
  /// out, or nullptr (Note [Pool options]).
  [[nodiscard]] void* borrow_on_oom_locked(std::size_t bytes, stream_t stream);

  driver* driver_;
  int device_;
  pointer_map* pointers_;
  device_trace trace_;
  core::memory_cap cap_;  ///< the device's total memory is read at set-up (Note [Pool setup])
  bool last_malloc_retried_ = false;  ///< set by malloc_with_retry_locked, read by oom_locked

  /// Held across the driver call of an allocate / free (Note [Hot path of the cudaMallocAsync backend]).
  mutable core::hybrid_mutex mutex_;
  async_accounting accounting_;
  capture_router captures_;
  record_stream_order stream_uses_;
  // After the device check (cap_) and the events: a dedicated pool is destroyed before them.
  stream_ordered_pool pool_;
  private_pools private_pools_;
  oom_reporter oom_;
};

}  // namespace streampool::async
