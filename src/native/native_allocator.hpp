// native_allocator.hpp — the native caching backend (PyTorch-native behaviour, docs/pytorch-compatibility.md §2–§3): the
// `allocator` implementation that owns the per-device state and the segment map, and the hot
// paths of allocate/deallocate. Built by native::make_native_allocator (src/core/backends.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "native/device_state.hpp"
#include "native/segment_map.hpp"
#include "native/size_rounding.hpp"
#include "streampool/allocator.hpp"

namespace streampool::native {

// Note [Stream arenas]
// A free block is only ever reused by the stream it was allocated on (docs/pytorch-compatibility.md §2.6), and a segment
// belongs to one stream, so the natural shard is (device, pool, stream): a stream_arena holds the
// free lists, segments and hot statistics of one shard under its own lock. An allocation finds
// its arena through a lock-free table (stream → arena) and locks only that arena. Threads on
// different streams therefore share no lock and no written cache line on a cache hit. A free
// finds the arena through the lock-free segment map and the block in the arena's own map (Note
// [Pointer lookup]), so each call takes exactly one lock. Anything
// that needs more than one arena (a new segment, GC, OOM release, empty_cache, snapshots,
// routing during capture) runs under the device mutex; see Note [Lock order].
// A thread_local "last arena" cache was considered and dropped: the table lookup is a hash and
// one or two loads of read-mostly memory, and a thread_local in a shared library costs a
// __tls_get_addr call, about the same, plus the allocator-lifetime (ABA) problem.

// Deferred frees in this backend (Note [Deferred frees during capture] in
// src/capture/capture_router.hpp). While a capture is underway on a device, no event is queried or
// synchronised and nothing is cudaFree'd: allocations take the slow entry
// (routing by filter, no event processing), the OOM path skips every release step, and
// empty_cache skips the device. A free of a block with stream uses cannot record events either:
// the block is parked (deferred) in the device's capture router (Note [Parked frees] in
// src/capture/capture_router.hpp). The first allocation after the last capture ends (or
// empty_cache) drops the stream uses recorded during the capture, records events for the
// remaining ones and frees the block when there are none (docs/pytorch-compatibility.md §3.4, default mode).

// Note [Capture start]
// The hot path reads "capture underway" without the device mutex (needs_slow_entry(): one relaxed
// load of the capture router's word, Note [Slow-entry word]). begin_allocate_to_pool
// publishes it and then locks and unlocks every arena of the device before returning, and the
// hot path reads it again after taking its arena lock. So an allocation or free either finishes
// (event queries included) before begin_allocate_to_pool returns — i.e. before the caller starts
// capturing — or sees the capture; no event is queried once a capture may be running.

class native_allocator final : public allocator {
 public:
  native_allocator(allocator_config config, std::shared_ptr<driver> drv);
  ~native_allocator() override;

  // --- introspection for tests and tools ----------------------------------------------------------
  /// Use count of a private pool (0 when unknown or released).
  [[nodiscard]] int pool_use_count(mempool_id pool, int device) const;
  /// Outstanding events of `device` (recorded at free time, not yet seen complete).
  [[nodiscard]] std::uint64_t pending_events(int device) const;
  /// Events created by the device's event pool (in use + idle).
  [[nodiscard]] std::size_t events_created(int device) const;
  /// Arenas read by the device-peak rises of `device` so far (Note [Device totals]; tests).
  [[nodiscard]] std::uint64_t peak_arena_reads(int device) const;
  /// Turns the front block (Note [Front block] in front_block.hpp) of every arena `device` has now
  /// on or off: off settles each one's and keeps its hot frees from parking. The tests compare
  /// both; the sleep of a pool uses stream_arena::set_front_enabled on its arenas.
  void set_front_blocks(int device, bool on);

 private:
  void* do_allocate(int device, std::size_t bytes, stream_t stream) override;
  void do_deallocate(void* ptr) override;
  void do_record_stream(void* ptr, stream_t stream) override;
  void do_empty_cache() override;
  [[nodiscard]] memory_stats do_stats(int device) const override;
  void do_reset_peak_stats(int device) override;
  void do_reset_accumulated_stats(int device) override;
  [[nodiscard]] memory_snapshot do_snapshot() const override;
  void do_record_history(bool enabled, std::size_t max_entries) override;
  [[nodiscard]] std::vector<trace_entry> do_trace(int device) const override;
  void do_set_segment_listener(std::shared_ptr<const segment_listener> listener) override;
  void do_set_memory_fraction(int device, double fraction) override;
  [[nodiscard]] double do_memory_fraction(int device) const override;
  [[nodiscard]] device_pools* do_pools(int device) const override;
  void do_set_settings(std::string_view text, const allocator_config& next) override;

  /// The private pools of one device (Note [Pool seam] in src/core/device_pools.cpp), over its
  /// device_state and the segment map (native_pools.cpp).
  class pool_seam final : public device_pools {
   public:
    pool_seam(device_state& state, const segment_map& segments) noexcept;

   private:
    void do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) override;
    void do_end_allocate_to_pool(mempool_id pool) override;
    void do_release_pool(mempool_id pool) override;
    void do_set_options(mempool_id pool, const pool_options& options) override;
    [[nodiscard]] pool_options do_options(mempool_id pool) const override;
    [[nodiscard]] void* do_allocate_at(void* ptr, std::size_t bytes, mempool_id pool) override;
    void do_sleep(mempool_id pool, const sleep_options& options) override;
    void do_wake(mempool_id pool) override;
    [[nodiscard]] pool_sleep_state do_sleep_state(mempool_id pool) const override;

    device_state* state_;
    const segment_map* segments_;
  };

  /// do_allocate when the front block does not serve (Note [Front block]): the arena lock through
  /// arena_mutex (settling), events, best fit and split, then the slow entry.
  [[gnu::noinline]] void* allocate_plain(device_state& d, std::size_t rounded, std::size_t bytes, stream_t stream);
  /// The slow entry: device mutex, routing, deferred frees and events, then the OOM ladder.
  [[nodiscard]] block* allocate_slow_entry(device_state& d, stream_t stream, std::size_t rounded,
                                           std::size_t requested);
  /// do_deallocate when the hot free does not serve (Note [Hot free]): the live map, stream uses,
  /// the trace, settling and the plain free.
  [[gnu::noinline]] void deallocate_plain(void* ptr);
  [[noreturn]] void bad_pointer(const char* operation, const void* ptr) const;
  /// Throws error unless `stream` belongs to the device of `b` (Note [record_stream across devices]).
  void check_stream_device(const stream_arena& a, const block& b, stream_t stream) const;

  /// The config the device states read: allocator::config() plus the runtime changes of
  /// set_settings, written under every device mutex (Note [Settings changed at run time]).
  allocator_config live_config_;
  size_policy policy_;
  segment_map segments_;  // before devices_: device states unregister segments into it
  std::atomic<bool> vmm_warned_{false};  // one "expandable segments fell back" warning
  std::vector<std::unique_ptr<device_state>> devices_;
  std::vector<std::unique_ptr<pool_seam>> pools_;  // one per device, after devices_ (they point there)
};

}  // namespace streampool::native
