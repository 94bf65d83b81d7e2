// host_cache.hpp (internal) — the pinned host caching allocator behind streampool::host_allocator:
// power-of-two free lists, the block table, stream-ordered reuse through per-stream event
// queues, statistics and snapshots; memory from pinned_source. One mutex guards the tables;
// driver calls that may be slow (allocating, freeing, recording events) are made outside it.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/hybrid_mutex.hpp"
#include "host/host_block.hpp"
#include "host/pinned_source.hpp"
#include "host/stream_events.hpp"
#include "streampool/host_allocator.hpp"

namespace streampool::host {

class background_poller;

class host_cache {
 public:
  host_cache(allocator_config config, std::shared_ptr<driver> drv);
  ~host_cache();
  host_cache(const host_cache&) = delete;
  host_cache& operator=(const host_cache&) = delete;

  [[nodiscard]] void* allocate(std::size_t bytes);
  void deallocate(void* ptr);
  void record_stream(void* ptr, stream_t stream);
  void empty_cache();
  /// One non-blocking pass over the pending events (allocation path, background thread).
  void process_events();

  [[nodiscard]] host_memory_stats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  [[nodiscard]] host_snapshot snapshot() const;
  [[nodiscard]] bool owns(const void* ptr) const;
  [[nodiscard]] const allocator_config& config() const noexcept { return config_; }
  [[nodiscard]] driver& drv() const noexcept { return *driver_; }

 private:
  /// Pops a cached block of `size` and hands it out (caller holds mutex_); nullptr if none.
  host_block* take_cached(std::size_t size, std::size_t requested);
  /// A block whose last event completed, or freed with no streams: back to its free list.
  void make_reusable(host_block* block);
  void process_events_locked();
  /// The device of `stream` (its owner, or the current device when the driver cannot say).
  [[nodiscard]] int device_of(stream_t stream) const;
  /// A new block from the source (no lock held on entry).
  [[nodiscard]] void* allocate_new(std::size_t size, std::size_t requested);
  /// Records one event per stream the block was used on; returns the entries (or retires).
  void record_free_events(host_block* block, const std::vector<stream_t>& streams);

  const allocator_config config_;
  const std::shared_ptr<driver> driver_;
  pinned_source source_;
  stream_events events_;
  /// Guards the tables below (and events_'s queues). A hybrid_mutex: the cache-hit path takes it
  /// twice per alloc+free pair with no call into pthreads when uncontended (Note [Hybrid mutex in
  /// core], src/core/hybrid_mutex.hpp).
  mutable core::hybrid_mutex mutex_;
  std::array<std::vector<host_block*>, size_class_count> free_;  ///< cached blocks, LIFO per class
  std::unordered_map<const void*, std::unique_ptr<host_block>> blocks_;  ///< every block by address
  stat allocation_;
  stat allocated_bytes_;
  std::unique_ptr<background_poller> poller_;  ///< pinned_use_background_threads
};

}  // namespace streampool::host
