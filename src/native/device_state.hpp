// device_state.hpp — everything the native backend keeps per device: the arenas (default pool per
// stream, private pools), the device mutex for slow paths, the device-wide statistics, the event
// pool, the trace ring, the memory-fraction cap, and the capture router (src/capture) with the
// arenas of private pools. Definitions are split over device_state.cpp (arenas, segments, stats),
// release.cpp (GC, release paths), capture_arenas.cpp (graph capture: the native side of the
// capture router), oom_ladder.cpp (the slow allocation path, docs/pytorch-compatibility.md §2.3) and expandable.cpp
// (expandable segments, docs/pytorch-compatibility.md §2.13).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capture/capture_router.hpp"
#include "core/event_pool.hpp"
#include "core/trace_ring.hpp"
#include "native/arena_table.hpp"
#include "native/expandable.hpp"
#include "native/segment_map.hpp"
#include "native/size_rounding.hpp"
#include "native/stream_arena.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/graph.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

// Note [Lock order]
// device mutex → arena locks; pointer-map shard → arena lock (record_stream only); the event-pool,
// trace-ring and capture router's deferred-free mutexes are leaves. Only the holder of the device
// mutex may hold more than one arena lock, and nobody waits for the device mutex while holding an
// arena lock (an allocation that misses drops its arena lock, takes the device mutex, then
// re-locks the arena). So the
// slow paths (new segment, GC, OOM release, empty_cache, snapshot, routing during capture) can
// lock any set of arenas in any order without deadlock, and the hot path never touches the device
// mutex.

// Note [Device peaks]
// current/allocated/freed of the per-arena statistics are summed exactly by stats(). A device-wide
// peak is the maximum over time of a sum over arenas, which cannot be maintained exactly without
// a shared counter written on every call (the very contention arenas avoid). Rule: whenever an
// arena's own current exceeds its own high-water mark, the device peak is raised to the sum of
// all arenas' currents at that moment; stats() also raises it to the current sum. Consequences:
// with one arena active since the last reset (one stream, no capture) peaks are exact; with
// several, a device peak is missed only when the streams' sums exceed it while
// each stream stays below its own earlier high-water mark — the reported peak is then a lower
// bound. (While streams are busy, one stats() call may add up per-stream values read a few
// nanoseconds apart, like any unlocked read of sharded counters.) The segment/reserved
// statistics are device-wide and exact.

/// Device-wide statistics, changed only under the device mutex.
struct device_counters {
  stat_array segment{};
  stat_array reserved_bytes{};
  stat oversize_segments{};
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_sync_all_streams = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
};

/// The memory of a private pool: one arena per stream that allocated in it.
struct pool_arenas {
  std::vector<stream_arena*> arenas;
};

/// The device's capture bookkeeping: private pools holding arenas, parked frees holding blocks.
using capture_router = capture::capture_router<pool_arenas, block*>;

class device_state {
 public:
  /// `vmm_warned` is the allocator's "expandable segments fell back" warning flag (one warning).
  device_state(driver& drv, const allocator_config& config, const size_policy& policy, segment_map& segments,
               int index, std::atomic<bool>& vmm_warned);
  ~device_state();
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;

  [[nodiscard]] int index() const noexcept { return index_; }
  [[nodiscard]] driver& drv() const noexcept { return *driver_; }
  [[nodiscard]] const size_policy& policy() const noexcept { return *policy_; }
  [[nodiscard]] const allocator_config& config() const noexcept { return *config_; }
  [[nodiscard]] detail::event_pool& events() noexcept { return events_; }
  [[nodiscard]] detail::trace_ring& trace() noexcept { return trace_; }
  [[nodiscard]] std::mutex& mutex() const noexcept { return mutex_; }

  // --- hot path (no lock) -----------------------------------------------------------------------
  [[nodiscard]] stream_arena* find_default_arena(stream_t stream) const noexcept { return table_.find(stream); }
  /// find_default_arena, creating the arena under the device mutex on first use of `stream`.
  [[nodiscard]] stream_arena& default_arena(stream_t stream);
  /// True when an allocation must take the slow entry: a capture is underway (routing, no event
  /// queries) or frees deferred by an earlier capture wait (docs/pytorch-compatibility.md §3.3/§3.4).
  [[nodiscard]] bool needs_slow_entry() const noexcept { return captures_.underway_or_deferred(); }
  [[nodiscard]] bool capture_underway() const noexcept { return captures_.underway(); }
  /// Recordings, private pools and parked frees (Note [Capture router] in src/capture).
  [[nodiscard]] capture_router& captures() noexcept { return captures_; }
  [[nodiscard]] bool gc_enabled() const noexcept { return gc_enabled_.load(std::memory_order_relaxed); }

  std::atomic<std::uint64_t> pending_events{0};     ///< outstanding events of all arenas
  std::atomic<std::uint64_t> gc_clock{0};           ///< large-pool get_free_block calls (GC on)

  /// Raises the device peak of arena statistic `index` to the current sum (Note [Device peaks]).
  void raise_peak(std::size_t index) noexcept;
  /// Every arena of the device, including recycled ones; safe without locks (arenas live as long
  /// as the device state).
  template <typename F>
  void for_each_arena(F&& f) const {
    for (stream_arena* a = first_arena_.load(std::memory_order_acquire); a != nullptr;
         a = a->next_in_device.load(std::memory_order_acquire)) {
      f(*a);
    }
  }

  // --- device mutex held --------------------------------------------------------------------------
  [[nodiscard]] stream_arena& default_arena_locked(stream_t stream);
  /// The arena an allocation on `stream` goes to: the newest capture route whose filter accepts
  /// `stream` (docs/pytorch-compatibility.md §3.2), else the default pool.
  [[nodiscard]] stream_arena& route_locked(stream_t stream);
  /// Locks every arena except `held` (already locked by the caller).
  [[nodiscard]] std::vector<std::unique_lock<hybrid_mutex>> lock_arenas(const stream_arena* held);
  /// Allocation after a miss (docs/pytorch-compatibility.md §2.3 steps 4–5); `a` locked. Throws out_of_memory at the end.
  [[nodiscard]] block* allocate_slow(stream_arena& a, std::size_t rounded, std::size_t requested);
  /// Parked frees (capture_arenas.cpp) and outstanding events of every arena (no capture may be
  /// underway).
  void process_deferred(const stream_arena* held);
  void process_all_events(const stream_arena* held);
  /// empty_cache for this device (docs/pytorch-compatibility.md §2.12); false when skipped because a capture is underway.
  bool empty_cache();

  // statistics
  [[nodiscard]] memory_stats stats();
  void reset_peaks();
  void reset_accumulated();

  // fraction cap (docs/pytorch-compatibility.md §2.12)
  void set_fraction(double fraction);
  [[nodiscard]] double fraction() const noexcept { return fraction_.load(std::memory_order_relaxed); }

  // private pools (capture_arenas.cpp); each takes the device mutex
  void begin_allocate_to_pool(mempool_id pool, stream_filter filter);
  void end_allocate_to_pool(mempool_id pool);
  void release_pool(mempool_id pool);
  [[nodiscard]] int pool_use_count(mempool_id pool) const;

  // snapshot (device mutex taken inside)
  void append_segments(std::vector<segment_info>& out);
  /// The device's segments and leftover pages (Note [Leftover pages]), taken under one hold of the
  /// device mutex so that they add up to reserved_bytes.
  void append_snapshot(memory_snapshot& out);

 private:
  friend class stream_arena;

  [[nodiscard]] stream_arena& new_arena(stream_t stream, private_pool* pool, mempool_id pool_id);
  /// New memory for a request (the alloc_block step of docs/pytorch-compatibility.md §2.3): a block of >= `rounded` bytes
  /// in no list, from a new segment or expandable growth; nullptr when out of memory.
  [[nodiscard]] block* grow(stream_arena& a, std::size_t rounded, bool small);
  [[nodiscard]] block* new_segment(stream_arena& a, std::size_t alloc_size, bool small);
  void release_block(stream_arena& a, block* b);
  void garbage_collect(const stream_arena* held);
  bool release_available(stream_arena& a, std::size_t rounded);
  void release_cached(const stream_arena* held);
  void synchronize_all_events(const stream_arena* held);
  void delete_dead_pools();
  [[nodiscard]] std::size_t total_memory();
  [[nodiscard]] std::size_t allowed_bytes();
  [[noreturn]] void throw_oom(stream_arena& a, std::size_t requested, std::size_t rounded, std::size_t alloc_size);
  /// The sentences an OOM message gets while a capture is underway (Note [OOM during capture]).
  [[nodiscard]] std::string capture_oom_note(const stream_arena& a) const;
  [[nodiscard]] stream_arena& pool_arena(private_pool& pool, stream_t stream);

  // expandable segments (expandable.cpp; Note [Expandable segments] in expandable.hpp)
  enum class vmm_mode : std::uint8_t { unknown, on, off };
  [[nodiscard]] bool expandable_on();
  void fall_back_to_normal_segments(const std::string& reason);
  [[nodiscard]] block* grow_expandable(stream_arena& a, std::size_t rounded, std::size_t alloc_size, bool small);
  [[nodiscard]] block* reserve_segment(stream_arena& a, bool small, std::size_t rounded);
  [[nodiscard]] block* map_pages(stream_arena& a, block* b, std::size_t bytes);
  void unmap_free_pages(stream_arena& a);
  void unmap_block(stream_arena& a, segment& seg, block* b);
  void destroy_expandable(stream_arena& a, segment* seg);
  void count_mapping(stream_arena& a, const segment& seg, std::uintptr_t lo, std::size_t bytes, bool mapped);
  // leftover pages (expandable_leftovers.cpp; Note [Leftover pages] in expandable.hpp)
  void give_back(segment& seg, std::size_t first, std::size_t mapped, std::size_t count) noexcept;
  [[nodiscard]] bool retire(leftover_page& page) noexcept;
  [[nodiscard]] std::size_t take_leftovers(vmm_handle_t* handles, std::size_t wanted, std::size_t page) noexcept;
  void keep_leftover(const leftover_page& page) noexcept;
  void release_leftovers() noexcept;
  [[nodiscard]] bool leftover_in(std::uintptr_t lo, std::size_t bytes) const noexcept;
  void append_segments_locked(std::vector<segment_info>& out);
  void append_leftovers_locked(std::vector<leftover_page_info>& out) const;

  driver* driver_;
  const allocator_config* config_;
  const size_policy* policy_;
  segment_map* segments_;
  int index_;
  mutable std::mutex mutex_;
  detail::event_pool events_;
  detail::trace_ring trace_;

  arena_table table_;
  std::atomic<stream_arena*> first_arena_{nullptr};
  std::vector<std::unique_ptr<stream_arena>> arenas_;  // owner of every arena ever created
  std::vector<stream_arena*> spare_arenas_;            // arenas of deleted private pools

  std::array<std::atomic<std::int64_t>, arena_stat_count> peaks_{};
  device_counters counters_;

  std::atomic<bool>* vmm_warned_;
  vmm_mode vmm_ = vmm_mode::off;  // device mutex (and everything below up to fraction_)
  vmm_geometry geometry_;
  std::vector<leftover_page> leftovers_;

  std::atomic<double> fraction_{1.0};
  std::atomic<bool> gc_enabled_{false};
  std::size_t total_memory_ = 0;  // lazily from get_device_info

  capture_router captures_;
};

}  // namespace streampool::native
