// device_state.hpp — the native backend's state of one device: its arenas (device_arenas: default
// pool per stream, private pools), the device mutex for slow paths, the OOM ladder, the device
// counters, and the capture router (src/capture) whose private pools hold arenas. Memory comes from
// its segment source; what the arenas share is its device_context. Definitions: device_state.cpp
// (statistics, snapshot), oom_ladder.cpp (the slow allocation path, docs/pytorch-compatibility.md §2.3, and
// empty_cache) and capture_arenas.cpp (graph capture: the native side of the capture router); what
// it reports about its arenas (snapshot segments, OOM figures) is native_report.cpp's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "native/capture_reuse.hpp"
#include "native/device_arenas.hpp"
#include "native/device_context.hpp"
#include "native/pool_sleep.hpp"
#include "native/segment_map.hpp"
#include "native/segment_source.hpp"
#include "native/size_rounding.hpp"
#include "native/stream_arena.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/graph.hpp"
#include "streampool/pools.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

// Note [Lock order]
// device mutex → arena locks; pointer-map shard → arena lock (record_stream only); the event-pool,
// trace-ring and capture router's deferred-free mutexes are leaves. Only the holder of the device
// mutex may hold more than one arena lock, and nobody waits for the device mutex while holding an
// arena lock (an allocation that misses drops its arena lock, takes the device mutex, then
// re-locks the arena). So the slow paths (new segment, GC, OOM release, empty_cache, snapshot,
// routing during capture) can lock any set of arenas in any order without deadlock, and the hot
// path never touches the device mutex.

/// Device-wide counters of the OOM ladder, changed only under the device mutex (the segment and
/// reserved statistics are the segment source's).
struct device_counters {
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_sync_all_streams = 0;
};

class device_state {
 public:
  /// `vmm_warned` is the allocator's "expandable segments fell back" warning flag (one warning).
  device_state(driver& drv, const allocator_config& config, const size_policy& policy, segment_map& segments,
               int index, std::atomic<bool>& vmm_warned);
  ~device_state();
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;

  [[nodiscard]] int index() const noexcept { return index_; }
  [[nodiscard]] core::event_pool& events() noexcept { return context_.events; }
  [[nodiscard]] core::trace_ring& trace() noexcept { return context_.trace; }
  /// Arenas read by device-peak rises (Note [Device totals]).
  [[nodiscard]] std::uint64_t peak_arena_reads() const noexcept { return context_.peaks.arena_reads(); }
  /// stream_arena::set_front_enabled on every arena there is now (Note [Front block]).
  void set_front_blocks(bool on);
  [[nodiscard]] std::mutex& mutex() const noexcept { return mutex_; }
  /// Outstanding events of all arenas (recorded at free time, not yet seen complete).
  [[nodiscard]] std::uint64_t pending_events() const noexcept {
    return context_.pending_events.load(std::memory_order_relaxed);
  }

  // --- hot path (no lock) -----------------------------------------------------------------------
  [[nodiscard]] stream_arena* find_default_arena(stream_t stream) const noexcept { return arenas_.find_default(stream); }
  /// find_default_arena, creating the arena under the device mutex on first use of `stream`.
  [[nodiscard]] stream_arena& default_arena(stream_t stream);
  /// True when an allocation must take the slow entry: a capture is underway (routing, no event
  /// queries) or frees deferred by an earlier capture wait (docs/pytorch-compatibility.md §3.3/§3.4).
  /// Also while the default pool sleeps (its allocations are refused there: Note [Refused while
  /// asleep]; the sleep holds the router's word). One relaxed load (Note [Slow-entry word]).
  [[nodiscard]] bool needs_slow_entry() const noexcept { return captures_.slow_entry(); }
  [[nodiscard]] bool capture_underway() const noexcept { return captures_.underway(); }

  // --- device mutex held --------------------------------------------------------------------------
  [[nodiscard]] stream_arena& default_arena_locked(stream_t stream) { return arenas_.default_arena(stream); }
  /// The arena an allocation on `stream` goes to: the newest capture route whose filter accepts
  /// `stream` (docs/pytorch-compatibility.md §3.2), else the default pool.
  [[nodiscard]] stream_arena& route_locked(stream_t stream);
  /// Refuses an allocation of `requested` bytes from `pool` while it sleeps (Note [Refused while
  /// asleep] in device_sleep.cpp). @throws error
  void check_awake_locked(mempool_id pool, std::size_t requested) const;
  /// graph_capture_record_stream_reuse:True, a capture underway: parked blocks allocated on
  /// `stream` that the graph orders before its next work go back to their free lists (Note [Reuse
  /// within a capture]). @throws std::bad_alloc (nothing changed)
  void reuse_in_capture_locked(stream_t stream);
  /// Allocation after a miss (docs/pytorch-compatibility.md §2.3 steps 4–5); `a` locked. Throws out_of_memory at the end.
  [[nodiscard]] block* allocate_slow(stream_arena& a, std::size_t rounded, std::size_t requested, stream_t stream);
  /// Parked frees (capture_arenas.cpp) and outstanding events of every arena (no capture may be
  /// underway).
  void process_deferred(const stream_arena* held);
  void process_all_events(const stream_arena* held) { arenas_.process_events(held); }
  /// empty_cache for this device (docs/pytorch-compatibility.md §2.12); false when skipped because a capture is underway.
  bool empty_cache();

  // statistics
  [[nodiscard]] memory_stats stats();
  void reset_peaks();
  void reset_accumulated();

  // fraction cap (docs/pytorch-compatibility.md §2.12); device mutex held to set it
  void set_fraction(double fraction);
  /// Settings changed at run time (Note [Settings changed at run time]), device mutex held: the
  /// config the context points to already has them; `fraction_given`: the change names
  /// per_process_memory_fraction (else the device's cap, perhaps set since, stays).
  void apply_settings_locked(bool fraction_given);
  [[nodiscard]] double fraction() const noexcept { return source_.fraction(); }

  // private pools (capture_arenas.cpp); each takes the device mutex
  void begin_allocate_to_pool(mempool_id pool, stream_filter filter);
  void end_allocate_to_pool(mempool_id pool);
  void release_pool(mempool_id pool);
  [[nodiscard]] int pool_use_count(mempool_id pool) const;
  void set_pool_options(mempool_id pool, const pool_options& options);
  /// The OOM ladder's last step for an allocation of general arena `a`: a free block of a
  /// use_on_oom pool on `stream`, handed out, or nullptr (Note [Pool options]). Device mutex and
  /// `a`'s lock held.
  [[nodiscard]] block* borrow_on_oom(const stream_arena& a, std::size_t rounded, std::size_t requested, stream_t stream);
  [[nodiscard]] pool_options get_pool_options(mempool_id pool) const;

  // sleep and wake (device_sleep.cpp; docs/sleep-wake.md); each takes the device mutex. {0,0}: the default pool.
  void sleep_pool(mempool_id pool, const sleep_options& options);
  void wake_pool(mempool_id pool);
  [[nodiscard]] pool_sleep_state sleep_state(mempool_id pool) const;

  // snapshot (device mutex taken inside)
  void append_segments(std::vector<segment_info>& out);
  /// The device's segments and leftover pages (Note [Leftover pages]), taken under one hold of the
  /// device mutex so that they add up to reserved_bytes.
  void append_snapshot(memory_snapshot& out);

 private:
  void release_cached(const stream_arena* held);
  void delete_dead_pools();
  [[noreturn]] void throw_oom(stream_arena& a, std::size_t requested, std::size_t rounded, std::size_t alloc_size);
  [[nodiscard]] stream_arena& pool_arena(private_pool& pool, stream_t stream);
  void append_segments_locked(std::vector<segment_info>& out);
  /// The arenas of `pool` ({0,0}: the default pool's). @throws error for an unknown private pool
  [[nodiscard]] std::vector<stream_arena*> pool_arenas_locked(mempool_id pool, const char* what) const;
  [[nodiscard]] bool pool_asleep_locked(mempool_id pool) const;

  int index_;
  mutable std::mutex mutex_;
  capture_router captures_;  // recordings, private pools, parked frees (Note [Capture router])
  device_context context_;  // what the arenas and the segment source share
  segment_source source_;
  device_arenas arenas_;
  device_counters counters_;
  std::unique_ptr<capture_reuse> reuse_;  // graph_capture_record_stream_reuse:True only
  std::map<mempool_id, sleep_record> sleeps_;  // pools asleep, or awake with a kept backup
};

}  // namespace streampool::native
