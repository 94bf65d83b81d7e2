// private_pools.hpp — the memory of one device's private pools in the cudaMallocAsync backend: the
// blocks (cudaMalloc) that allocations routed by a begin_allocate_to_pool recording get, reused
// only within their pool and on their stream, given back once the pool is released (Note [Private
// pools of the cudaMallocAsync backend] in private_pools.cpp). The capture router keeps the pools;
// the device decides whether a new block may be had (cap, device size: the OOM is its) and orders
// a free after its record_stream streams. Not thread-safe: the device mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "async/async_accounting.hpp"
#include "async/device_trace.hpp"
#include "async/pointer_map.hpp"
#include "async/stream_ordered_pool.hpp"
#include "capture/capture_router.hpp"
#include "streampool/driver.hpp"
#include "streampool/stats.hpp"

namespace streampool::async {

/// One block of a private pool: device memory of its own (cudaMalloc), never part of the
/// stream-ordered pool.
struct private_block {
  std::size_t size = 0;      ///< bytes obtained (the first request's footprint)
  stream_t stream = nullptr; ///< the stream it was allocated on: it is reused only on that stream
  bool idle = false;         ///< freed, waiting in the pool for a later allocation into the pool
  /// Where the memory came from when not cudaMalloc (Note [Pool options] in src/core/allocator.cpp).
  std::shared_ptr<const segment_provider> provider;
};

/// The memory of one private pool: every block it owns, live or idle, and the idle ones by
/// (stream, size) for best fit.
struct private_memory {
  std::map<std::uintptr_t, private_block> blocks;
  std::multimap<std::pair<stream_t, std::size_t>, std::uintptr_t> idle;
  std::size_t bytes = 0;  ///< sum of blocks' sizes
  std::size_t live = 0;   ///< blocks handed out and not freed
};

/// A private pool as the capture router keeps it for this backend: use count and blocks.
using private_pool = capture::private_pool<private_memory>;

class private_pools {
 public:
  /// `pool` is the device's stream-ordered pool, read with the private blocks into the reserve.
  private_pools(driver& drv, int device, pointer_map& pointers, async_accounting& accounting, device_trace trace,
                const stream_ordered_pool& pool) noexcept
      : driver_(&drv), device_(device), pointers_(&pointers), accounting_(&accounting), trace_(trace), pool_(&pool) {}

  /// The size of a new block for a request of `bytes` (what cudaMalloc charges for it).
  [[nodiscard]] static std::size_t new_block_size(std::size_t bytes) noexcept;

  /// Hands out an idle block of `pool` that fits a request of `bytes` on `stream` (registered in
  /// the pointer map); nullptr when none fits. @throws bad_alloc (nothing changed)
  [[nodiscard]] void* reuse(private_pool& pool, std::size_t bytes, stream_t stream);
  /// Hands out a new block of `size` bytes (new_block_size) for a request of `bytes` on `stream`;
  /// nullptr when the device is out of memory (nothing changed). @throws cuda_error (nothing
  /// changed); bad_alloc (before the block exists: nothing changed; after: it is idle in `pool`)
  [[nodiscard]] void* add_block(private_pool& pool, std::size_t bytes, std::size_t size, stream_t stream);
  /// Takes the block of `record` back into `pool`, idle; its record_stream streams are already
  /// waited for. @throws bad_alloc (nothing changed)
  void take_back(private_pool& pool, void* ptr, const allocation_record& record);

  /// Gives the idle blocks of `pool` back to the device (cudaFree; no capture may be underway; a
  /// block whose cudaFree fails stays for a later call). True when `pool` has no block left.
  bool release_idle(private_pool& pool) noexcept;
  /// cudaFree's every block of `pool`, live or idle, without bookkeeping (allocator teardown).
  void free_all(const private_pool& pool) noexcept;

  /// Widens the one-block segment of a live private block of `pool` (nullptr: unknown, left as it
  /// is) to the whole block, the part beyond the request's footprint as an inactive block.
  static void extend_to_block(segment_info& segment, const private_pool* pool);
  /// Appends one segment with one inactive block per idle block of `pool`.
  void append_idle_segments(const private_pool& pool, std::vector<segment_info>& out) const;

  /// Device memory the private pools hold (live and idle blocks); reserved, not in the pool's reserve.
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// Of which idle: held memory for the fraction cap (Note [Memory fraction] in memory_cap.cpp).
  [[nodiscard]] std::size_t idle_bytes() const noexcept { return idle_bytes_; }

 private:
  [[nodiscard]] allocation_record routed_record(const private_pool& pool, std::size_t bytes, stream_t stream) const;
  /// cudaFree of a block, or its provider's deallocate; false when that failed (or threw).
  bool free_block_memory(std::uintptr_t address, const private_block& block) noexcept;

  driver* driver_;
  int device_;
  pointer_map* pointers_;
  async_accounting* accounting_;
  device_trace trace_;
  const stream_ordered_pool* pool_;
  std::size_t bytes_ = 0;
  std::size_t idle_bytes_ = 0;
};

}  // namespace streampool::async
