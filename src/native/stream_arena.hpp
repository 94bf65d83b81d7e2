// stream_arena.hpp — one (device, pool, stream) shard of the native backend, with its own lock: its
// segments, its blocks (the block store: free lists, unmapped ranges, block objects) and live
// blocks, and the policy over them (best fit, split, free, merge); the events its freed blocks wait
// for (event_queues) and its hot statistics (arena_counters). Frees made during a capture are
// parked in the device's capture router (device_context) until it ends.
// Free blocks are never reused across streams (docs/pytorch-compatibility.md §2.6), so an allocation only ever needs its
// own arena; see Note [Stream arenas] in native_allocator.hpp. Device memory comes and goes
// through the segment source, which calls the segment functions below.
#pragma once

#include <cstddef>

#include "core/hybrid_mutex.hpp"
#include "native/arena_stats.hpp"
#include "native/block.hpp"
#include "native/block_store.hpp"
#include "native/device_context.hpp"
#include "native/event_queues.hpp"
#include "native/front_block.hpp"
#include "native/live_blocks.hpp"
#include "native/stream_order.hpp"
#include "streampool/graph.hpp"

namespace streampool::native {

// The arena lock is core's (Note [Hybrid mutex in core]), shared with the cudaMallocAsync backend.
using core::hybrid_mutex;

class stream_arena;

/// The arena lock as every path but the hot pair takes it: lock() settles the front block first,
/// so what the caller reads and changes is the plain state (Note [Front block]). Lockable.
class arena_mutex {
 public:
  /// `raw`: the lock itself, which the hot pair (hot_path.cpp) and the device peaks' reads take
  /// without the settle.
  arena_mutex(stream_arena& owner, hybrid_mutex& raw) noexcept : owner_(&owner), raw_(&raw) {}
  inline void lock() noexcept;  // after stream_arena, below
  [[nodiscard]] inline bool try_lock() noexcept;
  void unlock() noexcept { raw_->unlock(); }

 private:
  stream_arena* owner_;
  hybrid_mutex* raw_;
};

class stream_arena {
 public:
  stream_arena(device_context& device, stream_t stream, private_pool* pool, mempool_id pool_id);
  ~stream_arena();
  stream_arena(const stream_arena&) = delete;
  stream_arena& operator=(const stream_arena&) = delete;

  /// The arena lock; taking it settles the front block (Note [Front block]).
  [[nodiscard]] arena_mutex& mutex() noexcept { return lock_; }
  [[nodiscard]] stream_t stream() const noexcept { return stream_; }
  /// The cross-stream order of a shared arena (Note [Cross-stream reuse]); nullptr otherwise.
  [[nodiscard]] stream_order* order() const noexcept { return order_; }
  /// Makes this the device's shared arena (cross_stream_reuse:True), before its first block.
  void share(stream_order* order) noexcept {
    order_ = order;
    stats_.set_ordered(order != nullptr);  // the free's one check (Note [Device totals])
  }
  /// Whether hot frees may park a front block (Note [Front block]; arena lock held, which settled
  /// it): off for the sleep of a pool, which must reach every free block of the arena; on again
  /// after. Private pools' arenas park none in any case.
  void set_front_enabled(bool on) noexcept {
    front_enabled_ = on;
    stats_.set_no_front(!front_enabled_ || pool_ != nullptr);
  }
  [[nodiscard]] bool front_enabled() const noexcept { return front_enabled_; }
  /// The parked front block, or nullptr (tests; Note [Front block]).
  [[nodiscard]] const block* front() const noexcept { return front_.parked(); }
  [[nodiscard]] private_pool* pool() const noexcept { return pool_; }
  [[nodiscard]] mempool_id pool_id() const noexcept { return pool_id_; }
  [[nodiscard]] device_context& device() const noexcept { return *device_; }
  /// Gives a recycled (empty) arena a new owner. Device mutex and arena lock held.
  void reassign(stream_t stream, private_pool* pool, mempool_id pool_id) noexcept;

  // --- everything below: arena lock held ------------------------------------------------------
  /// Best fit (docs/pytorch-compatibility.md §2.6) + split (§2.7) + stats + trace; nullptr when no free block fits.
  /// In a shared arena the block may be ordered after other streams first (Note [Cross-stream
  /// reuse]); nullptr also when it cannot be now. @throws cuda_error (nothing changed then)
  [[nodiscard]] block* try_allocate(std::size_t rounded, std::size_t requested, stream_t stream);
  /// try_allocate, inlined into do_allocate (hot_path.cpp only; Note [Hot path layout]).
  [[nodiscard, gnu::always_inline]] inline block* try_allocate_inline(std::size_t rounded, std::size_t requested,
                                                                      stream_t stream);
  /// Hands out exactly [address, address + bytes) when it lies in one free mapped block of this
  /// arena (split off before and after); nullptr otherwise, nothing changed (Note [Allocations at
  /// an address] in native_allocator.cpp). Device mutex held too. @throws std::bad_alloc
  [[nodiscard]] block* allocate_at(std::uintptr_t address, std::size_t bytes);
  /// Hands out `b`, a block of at least `rounded` bytes that is in no list (from the segment
  /// source): split, stats, trace (the new-segment branch of docs/pytorch-compatibility.md §2.3).
  [[nodiscard]] block* allocate_block(block* b, std::size_t rounded, std::size_t requested, stream_t stream);
  /// The user's free (docs/pytorch-compatibility.md §2.8): stats, trace, then back to the free list, wait for events, or
  /// park until the capture ends (§3.4). `b` was already taken out of the live map (take_live).
  /// @throws cuda_error when the events of record_stream uses cannot be recorded: `b` is then
  /// back in the live map and nothing changed (Note [Failed frees]).
  [[gnu::always_inline]] inline void free_request(block* b);  // hot_path.cpp only
  /// The hot free of the newest live block at `ptr` (Note [Hot free] in front_block.hpp).
  [[nodiscard]] bool free_newest(std::uintptr_t ptr) noexcept { return front_.free_newest(live_, ptr); }
  /// free_request of a block with stream uses: events recorded, or parked during a capture.
  /// @throws cuda_error as free_request
  [[gnu::noinline]] void free_request_used(block* b);
  /// The hot allocation's take-back of the front block (Note [Front block]): `b` when the plain
  /// path would hand it out for `rounded`, else nullptr with nothing changed (hot_path.cpp only).
  /// @throws std::bad_alloc (nothing changed then)
  [[nodiscard, gnu::always_inline]] inline block* take_front(std::size_t rounded, std::size_t requested,
                                                             stream_t stream);
  /// Puts the front block into the free lists as the plain free would have (arena lock held).
  void settle() noexcept { front_.settle(); }
  /// Removes and returns the live block at `ptr`, or nullptr when this arena has none there.
  [[nodiscard]] block* take_live(std::uintptr_t ptr) noexcept { return live_.take(ptr); }
  [[nodiscard]] block* find_live(std::uintptr_t ptr) const noexcept { return live_.find(ptr); }
  /// Adds a stream use (docs/pytorch-compatibility.md §2.9) to an allocated block.
  void record_use(block* b, stream_t stream, bool during_capture) { b->uses.add(stream, during_capture); }

  [[nodiscard]] bool has_pending_events() const noexcept { return !events_.empty(); }
  /// Polls the head event of each stream's queue; completed blocks return to the free list.
  void process_events();
  /// Waits for every outstanding event (empty_cache / OOM release-all).
  void synchronize_events();
  /// A free parked during a capture (Note [Deferred frees during capture] in native_allocator.hpp),
  /// once no capture is underway: drops the capture-time uses, then records events for the rest
  /// or frees the block. @throws cuda_error as event_queues::record (the block stays parked)
  void complete_deferred(block* b);

  // --- segments (segment source; device mutex held too) ---------------------------------------
  /// Makes sure a split (or a new segment) finds a block object; may throw bad_alloc, so callers
  /// run it before changing anything.
  void reserve_blocks() {
    blocks_.reserve();
    live_.reserve_one();
  }
  /// The raw arena lock (hot_path.cpp; Note [Front block]).
  [[nodiscard]] hybrid_mutex& hot_mutex() noexcept { return mutex_; }
  /// The arena's blocks: the segment source maps and unmaps pages through them, and reads them.
  [[nodiscard]] block_store& blocks() noexcept { return blocks_; }
  [[nodiscard]] const block_store& blocks() const noexcept { return blocks_; }
  /// Links a new malloc'd segment in; returns its block (not yet in any list).
  [[nodiscard]] block* attach_segment(segment* seg);
  /// Unlinks the segment of free block `b`, a whole segment, and drops `b`; the caller frees the
  /// segment.
  void drop_segment(block* b) noexcept;
  /// Allocator teardown: hands outstanding events back to the pool and returns the arena's
  /// segments (their list, unlinked) for the segment source to give back.
  [[nodiscard]] segment* release_at_exit() noexcept;
  [[nodiscard]] segment* segments() const noexcept { return segments_; }

  // Expandable segments (Note [Expandable segments] in expandable.hpp).
  /// Links a new reservation in as one unmapped block.
  void attach_expandable(segment* seg);
  /// Unlinks an expandable segment that is one unmapped block; the caller frees it.
  void detach_expandable(segment* seg) noexcept;
  /// A shared arena's growth `b` (in no list) may include free memory another stream used last
  /// (Note [Growth next to another stream's free block]): orders `stream` after it. False (and
  /// `b` back in the free list) when that needs events during a capture. @throws cuda_error
  /// (`b` back in the free list)
  [[nodiscard]] bool order_growth(block* b, stream_t stream);

  // --- reading ------------------------------------------------------------------------------
  [[nodiscard]] bool empty() const noexcept {
    return segment_count_ == 0 && events_.empty();  // a parked block keeps its segment
  }
  [[nodiscard]] const arena_counters& counters() const noexcept { return stats_; }

 private:
  void link_segment(segment* seg) noexcept;
  void unlink_segment(segment* seg) noexcept;
  /// A shared arena's small request that the small pool cannot serve: a free piece of a partly
  /// used large-kind page that fits, or nullptr (Note [Filling partial pages], page_moves.cpp).
  [[nodiscard]] block* partial_page_fit(std::size_t rounded) const noexcept;
  // Defined in hot_path.cpp and inlined into their callers there (Note [Hot path layout]);
  // callers elsewhere use allocate_block and complete_pending.
  [[gnu::always_inline]] inline void free_block(block* b);
  /// free_block's merge and insert, and the statistics of both (hot_path.cpp).
  [[gnu::always_inline]] inline void merge_and_insert(block* b);
  /// The hot free's choice: park `b` as the front block (Note [Front block]) or free it.
  [[gnu::always_inline]] inline void park_or_free(block* b);
  /// park_or_free's other cases, out of line: settle an earlier front block, the rare flags, the
  /// plain free.
  [[gnu::noinline]] void free_unparked(block* b);
  /// The plain free's allocation, allocated bytes and oversize counters (a parked block's are the
  /// share's, Note [Front block counters]).
  [[gnu::always_inline]] inline void free_counts(block* b) noexcept;
  /// free_block's rare cases, out of line: the cross-stream order, the list of changed arenas.
  [[gnu::noinline]] void free_block_flags(block* b);
  [[gnu::always_inline]] inline block* alloc_found(block* b, std::size_t rounded, std::size_t requested,
                                                   stream_t stream);
  /// A pending free (its events done, or its capture over with no use left) completes: it is no
  /// longer active, and goes back to the free list (Note [Derived active counters]).
  void complete_pending(block* b);

  // First member: the cold calls of the inlined statistics updates (peak raising) then need no
  // address of their own on the hot path (Note [Hot path layout]).
  arena_counters stats_;
  device_context* device_;
  stream_t stream_;
  stream_order* order_ = nullptr;  // shared arena only (Note [Cross-stream reuse])
  private_pool* pool_;
  mempool_id pool_id_;
  hybrid_mutex mutex_;  // taken through lock_, except by the hot pair
  arena_mutex lock_{*this, mutex_};
  bool front_enabled_ = true;
  block_store blocks_;
  segment* segments_ = nullptr;
  std::size_t segment_count_ = 0;
  event_queues events_;
  live_blocks live_;  // allocated blocks by pointer (Note [Pointer lookup], Note [Newest live block])
  front_block front_{blocks_, stats_, *device_};  // Note [Front block]
};

void arena_mutex::lock() noexcept {
  raw_->lock();
  owner_->settle();
}

bool arena_mutex::try_lock() noexcept {
  if (!raw_->try_lock()) return false;
  owner_->settle();
  return true;
}

}  // namespace streampool::native
