// stream_arena.hpp — one (device, pool, stream) shard of the native backend: its free lists (small
// and large pool kinds), segments, blocks, outstanding events and deferred frees, with its own
// lock. Free blocks are never reused across streams (docs/pytorch-compatibility.md §2.6), so an allocation only ever needs
// its own arena; see Note [Stream arenas] in native_allocator.hpp.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "capture/capture_router.hpp"
#include "core/address_table.hpp"
#include "core/hybrid_mutex.hpp"
#include "native/arena_stats.hpp"
#include "native/block.hpp"
#include "native/free_list.hpp"
#include "native/ring_buffer.hpp"
#include "streampool/graph.hpp"

namespace streampool::native {

class device_state;
struct pool_arenas;  // device_state.hpp
/// A private pool as the native backend keeps it (the capture router's record, with its arenas).
using private_pool = capture::private_pool<pool_arenas>;

// The arena lock (Note [Hybrid mutex in core]) and the live-block table (Note [Address table])
// are core's, shared with the cudaMallocAsync backend.
using detail::hybrid_mutex;
/// Device pointer -> allocated block of one arena, under the arena lock (Note [Pointer lookup]).
using block_map = detail::address_table<block*>;

// Note [Block recycling]
// Block objects are created on split and dropped on merge, i.e. on almost every hot-path call.
// Each arena keeps dropped objects on an intrusive list (linked through block::left) and refills
// it 64 objects at a time, so the steady state allocates no host memory; the chunks live as long
// as the arena (arenas of dead private pools are recycled, not destroyed).
class stream_arena {
 public:
  stream_arena(device_state& device, stream_t stream, private_pool* pool, mempool_id pool_id);
  ~stream_arena();
  stream_arena(const stream_arena&) = delete;
  stream_arena& operator=(const stream_arena&) = delete;

  [[nodiscard]] hybrid_mutex& mutex() noexcept { return mutex_; }
  [[nodiscard]] stream_t stream() const noexcept { return stream_; }
  [[nodiscard]] private_pool* pool() const noexcept { return pool_; }
  [[nodiscard]] mempool_id pool_id() const noexcept { return pool_id_; }
  [[nodiscard]] device_state& device() const noexcept { return *device_; }
  /// Gives a recycled (empty) arena a new owner. Device mutex and arena lock held.
  void reassign(stream_t stream, private_pool* pool, mempool_id pool_id) noexcept;

  // --- everything below: arena lock held ------------------------------------------------------
  /// Best fit (docs/pytorch-compatibility.md §2.6) + split (§2.7) + stats + trace; nullptr when no free block fits.
  [[nodiscard]] block* try_allocate(std::size_t rounded, std::size_t requested);
  /// try_allocate, inlined into do_allocate (hot_path.cpp only; Note [Hot path layout]).
  [[nodiscard, gnu::always_inline]] inline block* try_allocate_inline(std::size_t rounded, std::size_t requested);
  /// Hands out `b`, a block of at least `rounded` bytes that is in no list (a new segment's block,
  /// or one taken by take_free): split, stats, trace (the new-segment branch of docs/pytorch-compatibility.md §2.3).
  [[nodiscard]] block* allocate_block(block* b, std::size_t rounded, std::size_t requested);
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

  [[nodiscard]] bool has_pending_events() const noexcept { return pending_events_ != 0; }
  /// Polls the head event of each stream's queue; completed blocks return to the free list.
  void process_events();
  /// Waits for every outstanding event (empty_cache / OOM release-all).
  void synchronize_events();
  /// A free parked during a capture (Note [Deferred frees during capture] in native_allocator.hpp),
  /// once no capture is underway: drops the capture-time uses, then records events for the rest
  /// or frees the block. @throws cuda_error as record_events (the block stays parked)
  void complete_deferred(block* b);

  /// Detaches unsplit free block `b` and its segment for release (device mutex held).
  void detach_segment(block* b) noexcept;
  /// Undoes detach_segment when the driver refused the free.
  void reattach_segment(block* b) noexcept;
  /// Links a new segment in; returns its block (not yet in any list).
  [[nodiscard]] block* attach_segment(segment* seg);
  void drop_block(block* b) noexcept { recycle(b); }

  // --- expandable segments (expandable_blocks.cpp; device mutex and arena lock held) ---------------
  // Note [Expandable segments] in expandable.hpp.
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
  /// Unlinks an expandable segment that is one unmapped block; the caller deletes it.
  void detach_expandable(segment* seg) noexcept;
  /// Takes a free block out of the free list, to hand it out with allocate_block.
  void take_free(block* b) noexcept { remove_free(b); }
  /// Allocator teardown: hands outstanding events back to the pool and returns every segment to
  /// the driver (status form), live allocations included.
  void release_at_exit() noexcept;
  /// Makes sure a split (or a new segment) finds a block object; may throw bad_alloc, so callers
  /// run it before changing anything.
  void reserve_blocks() {
    if (spare_ == nullptr || spare_->left == nullptr) add_chunk();
    live_.reserve_one();
  }

  [[nodiscard]] const small_free_list& small_blocks() const noexcept { return small_; }
  [[nodiscard]] const large_free_list& large_blocks() const noexcept { return large_; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_bytes_; }
  [[nodiscard]] std::size_t segment_count() const noexcept { return segment_count_; }
  [[nodiscard]] segment* segments() const noexcept { return segments_; }
  [[nodiscard]] bool empty() const noexcept {
    return segment_count_ == 0 && pending_events_ == 0;  // a parked block keeps its segment
  }
  [[nodiscard]] block* largest_free() const noexcept;

  // --- statistics (see arena_stats.hpp) ---------------------------------------------------------
  /// Current value of device-peak index `index` (kind * 3 + pool, or oversize) in this arena.
  [[nodiscard]] std::int64_t current(std::size_t index) const noexcept;
  /// Adds this arena's current/allocated/freed values into `out` (no peaks).
  void add_stats_to(memory_stats& out) const noexcept;
  void reset_peaks() noexcept;        // arena lock held
  void reset_accumulated() noexcept;  // arena lock held

  /// The device's list of every arena (lock-free traversal; see device_state).
  std::atomic<stream_arena*> next_in_device{nullptr};

 private:
  struct pending_event {
    event_t event = nullptr;
    block* owner = nullptr;
  };
  struct event_queue {
    stream_t stream = nullptr;
    ring_buffer<pending_event> items;
  };

  // Free-list and block-object helpers: inline, they are on every cache-hit path.
  void insert_free(block* b) noexcept {
    b->in_free_list = true;
    free_bytes_ += b->size;
    if (b->seg->small) {
      small_.insert(b);
    } else {
      b->gc_count_base = gc_clock_->load(std::memory_order_relaxed);
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
    recycle(n);
  }
  void unlink_segment(segment* seg) noexcept;
  /// The expandable best-fit rule of docs/pytorch-compatibility.md §2.6 (Note [Expandable segments]).
  [[nodiscard]] block* prefer_without_tail(block* b, bool small) const noexcept;
  void release_expandable_at_exit(segment* seg) noexcept;
  // Defined in hot_path.cpp and inlined into their callers there (Note [Hot path layout]);
  // callers elsewhere use allocate_block and complete_pending.
  [[gnu::always_inline]] inline void free_block(block* b);
  [[gnu::always_inline]] inline block* alloc_found(block* b, std::size_t rounded, std::size_t requested);
  /// A pending free (its events done, or its capture over with no use left) completes: it is no
  /// longer active, and goes back to the free list (Note [Derived active counters]).
  void complete_pending(block* b);
  /// One event per stream use of `b`, recorded and queued; uses cleared. All or nothing:
  /// @throws cuda_error (or bad_alloc) with nothing changed (Note [Failed frees]).
  void record_events(block* b);
  /// The queue of `stream` (created empty on first use).
  event_queue& queue_for(stream_t stream);
  void event_done(block* b) noexcept;
  block* new_block() noexcept {
    // reserve_blocks() ran before the operation that needs this object.
    block* b = spare_;
    spare_ = b->left;
    b->left = nullptr;
    b->arena = this;
    return b;
  }
  void add_chunk();
  void recycle(block* b) noexcept {
    b->ptr = 0;
    b->size = b->requested_size = 0;
    b->prev = b->next = b->right = nullptr;
    b->seg = nullptr;
    b->event_count = 0;
    b->allocated = b->in_free_list = b->deferred = false;
    b->mapped = true;
    b->uses.clear();
    b->left = spare_;
    spare_ = b;
  }

  // Note [Derived active counters]
  // A block is active from its allocation until its free completes; in between it may wait for
  // the events of record_stream uses or for a capture to end ("pending"). So active = allocation +
  // pending, and active_bytes = allocated_bytes + pending bytes. The hot path therefore updates
  // only allocation and allocated_bytes; the counters_ slots of active and active_bytes hold the
  // pending block count and bytes (changed only when a free starts or ends waiting, which is not
  // a cache hit), while their `peak` fields are active's own peaks. Readers derive (current(),
  // add_stats_to, reset_peaks): current = base + pending; allocated (accumulated) = allocation's,
  // since every allocation makes one block active; freed = base.freed - pending + pending at the
  // last reset_accumulated (the pending slot's offset). Peaks: active rises only when an
  // allocation rises; with nothing pending active equals allocation and its peak is at least
  // allocation's, so it can only pass its peak where allocation passes its own (add_stat calls
  // raise_active_peaks there); with something pending (pending_blocks_ != 0) every allocation
  // checks. A cache-hit pair makes four counter updates fewer than when active was kept apart.

  // Note [Hot statistics]
  // A cache-hit pair changes up to ten counters (allocation and its bytes, requested bytes,
  // inactive_split when a block is split or merged; active is derived, Note [Derived active
  // counters]). Each change is written out for its
  // sign: an increase checks this arena's peak of the pool kind and of "all" (Note [Device peaks]),
  // a decrease only adds to `freed`. The arena is the only writer, so the counters are read back
  // with plain (relaxed) loads; the pair of functions below is what the hot path inlines.
  /// +amount (>= 0) on (kind, pool kind); "all" is implied. Not for active / active_bytes, which
  /// are derived (Note [Derived active counters]).
  void add_stat(arena_stat_kind kind, bool small, std::int64_t amount) noexcept {
    const auto k = static_cast<std::size_t>(kind);
    auto& pair = counters_[k];
    arena_counter& c = pair[small ? 0 : 1];
    const std::int64_t now = c.now() + amount;
    c.current.store(now, std::memory_order_relaxed);
    // Active = allocation + pending can only pass its peak where allocation passes its own.
    const bool drives_active = kind == arena_stat_kind::allocation || kind == arena_stat_kind::allocated_bytes;
    if (now > c.peak) [[unlikely]] {
      c.peak = now;
      raise_device_peak(stat_index(kind, small ? stat_pool::small_pool : stat_pool::large_pool));
      if (drives_active) raise_active_peaks();
    }
    const std::int64_t all = pair[0].now() + pair[1].now();
    if (all > all_peak_[k]) [[unlikely]] {
      all_peak_[k] = all;
      raise_device_peak(stat_index(kind, stat_pool::all));
      if (drives_active) raise_active_peaks();
    }
  }
  /// A freed block starts (+1, +bytes) or ends (-1, -bytes) waiting for its events or its capture.
  /// Active is unchanged by the start (allocation falls by as much), so no peak can move.
  void change_pending(bool small, std::int64_t blocks, std::int64_t bytes) noexcept {
    arena_counter& n = counters_[static_cast<std::size_t>(arena_stat_kind::active)][small ? 0 : 1];
    arena_counter& b = counters_[static_cast<std::size_t>(arena_stat_kind::active_bytes)][small ? 0 : 1];
    n.current.store(n.now() + blocks, std::memory_order_relaxed);
    b.current.store(b.now() + bytes, std::memory_order_relaxed);
    pending_blocks_ = static_cast<std::size_t>(static_cast<std::int64_t>(pending_blocks_) + blocks);
  }
  /// Active (allocation + pending) and active bytes of pool kind `pool` (0 small, 1 large).
  [[nodiscard]] std::int64_t active_now(arena_stat_kind kind, std::size_t pool) const noexcept;
  /// Raises this arena's active / active_bytes peaks (and the device's) to their current values.
  void raise_active_peaks() noexcept;
  /// -amount (amount >= 0) on (kind, pool kind).
  void sub_stat(arena_stat_kind kind, bool small, std::int64_t amount) noexcept {
    arena_counter& c = counters_[static_cast<std::size_t>(kind)][small ? 0 : 1];
    c.current.store(c.now() - amount, std::memory_order_relaxed);
    c.freed.store(c.freed.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
  }
  /// +amount or -amount on (kind, pool kind of the block).
  void change(arena_stat_kind kind, bool small, std::int64_t amount) noexcept {
    if (amount < 0) sub_stat(kind, small, -amount);
    else add_stat(kind, small, amount);
  }
  void change_oversize(std::int64_t amount) noexcept {
    const std::int64_t now = oversize_.now() + amount;
    oversize_.current.store(now, std::memory_order_relaxed);
    if (amount < 0) {
      oversize_.freed.store(oversize_.freed.load(std::memory_order_relaxed) - amount, std::memory_order_relaxed);
    } else if (now > oversize_.peak) {
      oversize_.peak = now;
      raise_device_peak(oversize_allocations_index);
    }
  }
  void raise_device_peak(std::size_t index) noexcept;

  device_state* device_;
  const std::atomic<std::uint64_t>* gc_clock_;  // the device's GC clock (docs/pytorch-compatibility.md §2.11)
  stream_t stream_;
  private_pool* pool_;
  mempool_id pool_id_;
  hybrid_mutex mutex_;
  small_free_list small_;
  large_free_list large_;
  std::array<block_treap<by_address>, 2> unmapped_{};  // expandable segments: [small, large]
  std::size_t free_bytes_ = 0;
  segment* segments_ = nullptr;
  std::size_t segment_count_ = 0;
  std::vector<event_queue> queues_;  // one per used stream
  std::size_t pending_events_ = 0;
  std::vector<event_t> event_scratch_;  // record_events' events before they are queued
  block* spare_ = nullptr;
  std::vector<std::unique_ptr<block[]>> chunks_;
  block_map live_;  // allocated blocks by pointer (Note [Pointer lookup])
  std::array<std::array<arena_counter, 2>, arena_stat_kinds> counters_{};  // [kind][small, large]
  std::array<std::int64_t, arena_stat_kinds> all_peak_{};
  std::size_t pending_blocks_ = 0;  // freed blocks waiting for events or a capture (both pool kinds)
  arena_counter oversize_;
};

}  // namespace streampool::native
