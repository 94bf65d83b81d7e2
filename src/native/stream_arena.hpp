// stream_arena.hpp — one (device, pool, stream) shard of the native backend: its free lists (small
// and large pool kinds), segments and their blocks, live blocks, with its own lock; the events its
// freed blocks wait for (event_queues) and its hot statistics (arena_counters). Frees made during
// a capture are parked in the device's capture router (device_context) until it ends.
// Free blocks are never reused across streams (docs/pytorch-compatibility.md §2.6), so an allocation only ever needs its
// own arena; see Note [Stream arenas] in native_allocator.hpp. Device memory comes and goes
// through the segment source, which calls the segment functions below.
#pragma once

#include <array>
#include <cstddef>

#include "core/address_table.hpp"
#include "core/hybrid_mutex.hpp"
#include "native/arena_stats.hpp"
#include "native/block.hpp"
#include "native/device_context.hpp"
#include "native/event_queues.hpp"
#include "native/free_list.hpp"
#include "native/stream_order.hpp"
#include "streampool/graph.hpp"

namespace streampool::native {

// The arena lock (Note [Hybrid mutex in core]) and the live-block table (Note [Address table])
// are core's, shared with the cudaMallocAsync backend.
using core::hybrid_mutex;
/// Device pointer -> allocated block of one arena, under the arena lock (Note [Pointer lookup]).
using block_map = core::address_table<block*>;

class stream_arena {
 public:
  stream_arena(device_context& device, stream_t stream, private_pool* pool, mempool_id pool_id);
  ~stream_arena();
  stream_arena(const stream_arena&) = delete;
  stream_arena& operator=(const stream_arena&) = delete;

  [[nodiscard]] hybrid_mutex& mutex() noexcept { return mutex_; }
  [[nodiscard]] stream_t stream() const noexcept { return stream_; }
  /// The cross-stream order of a shared arena (Note [Cross-stream reuse]); nullptr otherwise.
  [[nodiscard]] stream_order* order() const noexcept { return order_; }
  /// Makes this the device's shared arena (cross_stream_reuse:True), before its first block.
  void share(stream_order* order) noexcept { order_ = order; }
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
  /// Hands out `b`, a block of at least `rounded` bytes that is in no list (from the segment
  /// source): split, stats, trace (the new-segment branch of docs/pytorch-compatibility.md §2.3).
  [[nodiscard]] block* allocate_block(block* b, std::size_t rounded, std::size_t requested, stream_t stream);
  /// The user's free (docs/pytorch-compatibility.md §2.8): stats, trace, then back to the free list, wait for events, or
  /// park until the capture ends (§3.4). `b` was already taken out of the live map (take_live).
  /// @throws cuda_error when the events of record_stream uses cannot be recorded: `b` is then
  /// back in the live map and nothing changed (Note [Failed frees]).
  [[gnu::always_inline]] inline void free_request(block* b);  // hot_path.cpp only
  /// Removes and returns the live block at `ptr`, or nullptr when this arena has none there.
  [[nodiscard]] block* take_live(std::uintptr_t ptr) noexcept { return live_.take(ptr).value_or(nullptr); }
  [[nodiscard]] block* find_live(std::uintptr_t ptr) const noexcept {
    block* const* b = live_.find(ptr);
    return b != nullptr ? *b : nullptr;
  }
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
  /// PyTorch's find_expandable_block: for the unmapped blocks of this pool kind in address order,
  /// the block itself or the free block right before it, when `size` growable bytes start there.
  [[nodiscard]] block* find_growable(bool small, std::size_t size) const;
  /// The first `bytes` (whole pages) of unmapped block `b` were mapped: the rest stays unmapped,
  /// the mapped part merges with free neighbours into the free list. Returns the merged block.
  block* mark_mapped(block* b, std::size_t bytes) noexcept;
  /// [lo, lo + bytes) (whole pages) inside free block `b` was unmapped: `b` becomes the unmapped
  /// hole (merged with unmapped neighbours), the parts around it stay free. Returns the hole.
  block* mark_unmapped(block* b, std::uintptr_t lo, std::size_t bytes) noexcept;
  /// Unlinks an expandable segment that is one unmapped block; the caller frees it.
  void detach_expandable(segment* seg) noexcept;
  /// Takes a free block out of the free list, to hand it out with allocate_block.
  void take_free(block* b) noexcept { remove_free(b); }
  /// A shared arena's growth `b` (in no list) may include free memory another stream used last
  /// (Note [Growth next to another stream's free block]): orders `stream` after it. False (and
  /// `b` back in the free list) when that needs events during a capture. @throws cuda_error
  /// (`b` back in the free list)
  [[nodiscard]] bool order_growth(block* b, stream_t stream);

  // --- reading ------------------------------------------------------------------------------
  [[nodiscard]] const small_free_list& small_blocks() const noexcept { return small_; }
  [[nodiscard]] const large_free_list& large_blocks() const noexcept { return large_; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_bytes_; }
  [[nodiscard]] bool empty() const noexcept {
    return segment_count_ == 0 && events_.empty();  // a parked block keeps its segment
  }
  [[nodiscard]] block* largest_free() const noexcept;
  [[nodiscard]] const arena_counters& counters() const noexcept { return stats_; }

 private:
  // Free-list and block-object helpers: inline, they are on every cache-hit path.
  void insert_free(block* b) noexcept {
    b->in_free_list = true;
    free_bytes_ += b->size;
    if (b->seg->small) {
      small_.insert(b);
    } else {
      b->gc_count_base = device_->gc_clock.load(std::memory_order_relaxed);
      large_.insert(b);
    }
  }
  void remove_free(block* b) noexcept {
    if (b->seg->small) small_.erase(b);
    else large_.erase(b);
    b->in_free_list = false;
    free_bytes_ -= b->size;
  }
  /// Merges the adjacent block `n` (prev or next of `b`, already out of every list) into `b`.
  void absorb(block* b, block* n) noexcept {
    if (n == b->prev) {
      b->ptr = n->ptr;
      b->prev = n->prev;
      if (b->prev != nullptr) b->prev->next = b;
      else b->seg->head = b;
    } else {
      b->next = n->next;
      if (b->next != nullptr) b->next->prev = b;
    }
    b->size += n->size;
    b->hazard_streams |= n->hazard_streams;  // Note [Cross-stream reuse]; both 0 unless shared
    if (n->hazard_ticket > b->hazard_ticket) b->hazard_ticket = n->hazard_ticket;
    recycle(n);
  }
  void link_segment(segment* seg) noexcept;
  void unlink_segment(segment* seg) noexcept;
  /// The expandable best-fit rule of docs/pytorch-compatibility.md §2.6 (Note [Expandable segments]).
  [[nodiscard]] block* prefer_without_tail(block* b, bool small) const noexcept;
  /// A shared arena's small request that the small pool cannot serve: a free piece of a partly
  /// used large-kind page that fits, or nullptr (Note [Filling partial pages], page_moves.cpp).
  [[nodiscard]] block* partial_page_fit(std::size_t rounded) const noexcept;
  // Defined in hot_path.cpp and inlined into their callers there (Note [Hot path layout]);
  // callers elsewhere use allocate_block and complete_pending.
  [[gnu::always_inline]] inline void free_block(block* b);
  [[gnu::always_inline]] inline block* alloc_found(block* b, std::size_t rounded, std::size_t requested,
                                                   stream_t stream);
  /// A pending free (its events done, or its capture over with no use left) completes: it is no
  /// longer active, and goes back to the free list (Note [Derived active counters]).
  void complete_pending(block* b);
  block* new_block() noexcept { return blocks_.take(this); }  // reserve_blocks() ran before
  void recycle(block* b) noexcept { blocks_.recycle(b); }

  // First member: the cold calls of the inlined statistics updates (peak raising) then need no
  // address of their own on the hot path (Note [Hot path layout]).
  arena_counters stats_;
  device_context* device_;
  stream_t stream_;
  stream_order* order_ = nullptr;  // shared arena only (Note [Cross-stream reuse])
  private_pool* pool_;
  mempool_id pool_id_;
  hybrid_mutex mutex_;
  small_free_list small_;
  large_free_list large_;
  std::array<block_treap<by_address>, 2> unmapped_{};  // expandable segments: [small, large]
  std::size_t free_bytes_ = 0;
  segment* segments_ = nullptr;
  std::size_t segment_count_ = 0;
  event_queues events_;
  block_pool blocks_;
  block_map live_;  // allocated blocks by pointer (Note [Pointer lookup])
};

}  // namespace streampool::native
