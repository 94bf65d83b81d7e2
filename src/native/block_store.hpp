// block_store.hpp — the blocks of one arena as data structures: the free lists of both pool kinds,
// the unmapped ranges of its expandable segments (a treap per kind, by address), the free bytes,
// and the recycled block objects (Note [Block recycling]), with the operations on them: insert and
// erase a free block, best fit (with the expandable rule), split off and merge neighbours, and the
// page side of expandable segments (mark_mapped, mark_unmapped). Which pool, whether to split, the
// statistics, events and the lock are the owning stream_arena's; its lock guards everything here.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "native/block.hpp"
#include "native/block_treap.hpp"
#include "native/free_list.hpp"

namespace streampool::native {

// Note [Block recycling]
// Block objects are created on split and dropped on merge, i.e. on almost every hot-path call.
// Each arena's block store keeps dropped objects on an intrusive list (linked through block::left)
// and refills it 64 objects at a time, so the steady state allocates no host memory; the chunks
// live as long as the arena (arenas of dead private pools are recycled, not destroyed).

/// The block objects of one arena (Note [Block recycling]); inline, it is on every cache-hit path.
class block_pool {
 public:
  /// Makes sure the next two take() find an object (a split, or a new segment and its rest).
  /// @throws std::bad_alloc, so callers run it before changing anything
  void reserve() {
    if (spare_ == nullptr || spare_->left == nullptr) add_chunk();
  }
  /// A clean block owned by `owner`; reserve() ran before.
  [[nodiscard]] block* take(stream_arena* owner) noexcept {
    block* b = spare_;
    spare_ = b->left;
    b->left = nullptr;
    b->arena = owner;
    return b;
  }
  void recycle(block* b) noexcept {
    b->ptr = 0;
    b->size = b->requested_size = 0;
    b->prev = b->next = b->right = nullptr;
    b->seg = nullptr;
    b->stream = nullptr;
    b->hazard_streams = b->hazard_ticket = 0;
    b->event_count = 0;
    b->allocated = b->in_free_list = b->deferred = false;
    b->mapped = true;
    b->uses.clear();
    b->left = spare_;
    spare_ = b;
  }

 private:
  [[gnu::noinline]] void add_chunk() {
    constexpr std::size_t chunk = 64;
    chunks_.reserve(chunks_.size() + 1);
    auto objects = std::make_unique<block[]>(chunk);
    for (std::size_t i = 0; i < chunk; ++i) recycle(&objects[i]);
    chunks_.push_back(std::move(objects));
  }

  block* spare_ = nullptr;
  std::vector<std::unique_ptr<block[]>> chunks_;
};

class block_store {
 public:
  /// `owner` gets the block objects; `gc_clock` stamps large free blocks (docs/pytorch-compatibility.md §2.11).
  block_store(stream_arena& owner, const std::atomic<std::uint64_t>& gc_clock) noexcept
      : owner_(&owner), gc_clock_(&gc_clock) {}

  // --- free lists (inline: they are on every cache-hit path) -------------------------------------
  void insert_free(block* b) noexcept {
    ++version_;
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
    ++version_;
    if (b->seg->small) small_.erase(b);
    else large_.erase(b);
    b->in_free_list = false;
    free_bytes_ -= b->size;
  }
  /// Best fit in a pool kind (docs/pytorch-compatibility.md §2.6) under the expandable rule; not
  /// removed, nullptr when none. The large kind's oversize rule is the caller's.
  [[nodiscard]] block* best_fit_small(std::size_t rounded) const noexcept {
    block* b = small_.find(rounded);
    return b != nullptr && b->seg->expandable ? prefer_without_tail(b, true) : b;
  }
  [[nodiscard]] block* best_fit_large(std::size_t rounded) const noexcept {
    block* b = large_.lower_bound(rounded);
    return b != nullptr && b->seg->expandable ? prefer_without_tail(b, false) : b;
  }
  /// Splits free block `b` (in no list) after its first `bytes`: the rest, which keeps `b`'s last
  /// users (Note [Cross-stream reuse]), goes into the free list and is returned. reserve() ran before.
  block* split(block* b, std::size_t bytes) noexcept {
    block* rest = take_block();
    rest->ptr = b->ptr + bytes;
    rest->size = b->size - bytes;
    rest->seg = b->seg;
    rest->hazard_streams = b->hazard_streams;
    rest->hazard_ticket = b->hazard_ticket;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next != nullptr) rest->next->prev = rest;
    b->next = rest;
    b->size = bytes;
    insert_free(rest);
    return rest;
  }
  /// Merges the free neighbours of `b` (in no list) into it, the merged block taking the lower
  /// address (docs/pytorch-compatibility.md §2.8: an unmapped neighbour is never in a free list);
  /// returns how many merged.
  int merge_free_neighbours(block* b) noexcept {
    int merged = 0;
    for (block* n : {b->prev, b->next}) {
      if (n == nullptr || !n->in_free_list) continue;
      remove_free(n);
      ++merged;
      absorb(b, n);
    }
    return merged;
  }

  // --- block objects ------------------------------------------------------------------------------
  /// Makes sure a split (or a new segment) finds a block object. @throws std::bad_alloc
  void reserve() { pool_.reserve(); }
  /// A clean block of the owning arena; reserve() ran before.
  [[nodiscard]] block* take_block() noexcept { return pool_.take(owner_); }
  void recycle(block* b) noexcept { pool_.recycle(b); }

  // --- expandable segments (Note [Expandable segments] in expandable.hpp) -----------------------
  /// A new reservation's one block, unmapped.
  void add_unmapped(block* b) noexcept { unmapped_[kind_of(b->seg->small)].insert(b); }
  void erase_unmapped(block* b) noexcept { unmapped_[kind_of(b->seg->small)].erase(b); }
  /// PyTorch's find_expandable_block: for the unmapped blocks of this pool kind in address order,
  /// the block itself or the free block right before it, when `size` growable bytes start there.
  [[nodiscard]] block* find_growable(bool small, std::size_t size) const;
  /// The first `bytes` (whole pages) of unmapped block `b` were mapped: the rest stays unmapped,
  /// the mapped part merges with free neighbours into the free list. Returns the merged block.
  block* mark_mapped(block* b, std::size_t bytes) noexcept;
  /// [lo, lo + bytes) (whole pages) inside free block `b` was unmapped: `b` becomes the unmapped
  /// hole (merged with unmapped neighbours), the parts around it stay free. Returns the hole.
  block* mark_unmapped(block* b, std::uintptr_t lo, std::size_t bytes) noexcept;

  // --- reading ------------------------------------------------------------------------------------
  [[nodiscard]] const small_free_list& small_list() const noexcept { return small_; }
  [[nodiscard]] const large_free_list& large_list() const noexcept { return large_; }
  [[nodiscard]] std::size_t free_bytes() const noexcept { return free_bytes_; }
  /// Changes with every insert into and removal from the free lists (Note [Front block] in
  /// front_block.hpp: a check of the lists stays valid while it is unchanged).
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  [[nodiscard]] block* largest_free() const noexcept;

 private:
  static constexpr std::size_t kind_of(bool small) noexcept { return small ? 0 : 1; }
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
  /// The expandable best-fit rule of docs/pytorch-compatibility.md §2.6 (Note [Expandable segments]).
  [[nodiscard]] block* prefer_without_tail(block* b, bool small) const noexcept;

  stream_arena* owner_;
  const std::atomic<std::uint64_t>* gc_clock_;
  small_free_list small_;
  large_free_list large_;
  std::array<block_treap<by_address>, 2> unmapped_{};  // expandable segments: [small, large]
  std::size_t free_bytes_ = 0;
  std::uint64_t version_ = 0;
  block_pool pool_;
};

}  // namespace streampool::native
