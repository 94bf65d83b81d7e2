// block_store.cpp — the block operations off the cache-hit path: the largest free block, the
// expandable best-fit rule (docs/pytorch-compatibility.md §2.6) and the block side of expandable
// segments (§2.13): finding a growable run, and splitting and merging around mapped and unmapped
// pages. The hot operations (free-list insert and erase, best fit, split, merge) are inline in
// block_store.hpp.
#include "native/block_store.hpp"

namespace streampool::native {
namespace {

/// The block's size plus the unmapped range right after it ("expandable size", docs/pytorch-compatibility.md §2.6).
std::size_t reach(const block* b) noexcept {
  return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
}

}  // namespace

block* block_store::largest_free() const noexcept {
  block* big = large_.largest();
  block* small = small_.largest();
  if (big == nullptr) return small;
  if (small == nullptr) return big;
  return big->size >= small->size ? big : small;
}

block* block_store::prefer_without_tail(block* b, bool small) const noexcept {
  // PyTorch walks on while the next candidate (same stream, larger or equal size) reaches less
  // far: the free block at the growth frontier reaches to the end of the reservation, so any
  // other fitting block is taken before it and the frontier stays free to grow in place. A block
  // with no unmapped range after it reaches only its size, which no later candidate undercuts:
  // the walk stops there without looking; so does it when `b` is the arena's only free block.
  if (b->size == free_bytes_) return b;
  while (b->seg->expandable && b->next != nullptr && !b->next->mapped) {
    block* n = small ? small_.next_after(b) : large_.next_after(b);
    if (n == nullptr || reach(n) >= reach(b)) break;
    b = n;
  }
  return b;
}

// --- expandable segments (Note [Expandable segments] in expandable.hpp) ------------------------------

block* block_store::find_growable(bool small, std::size_t size) const {
  auto has_room = [size](const block* b) {
    std::size_t bytes = 0;
    for (; b != nullptr && bytes < size && b->growable(); b = b->next) bytes += b->size;
    return bytes >= size;
  };
  block* found = nullptr;
  (void)unmapped_[kind_of(small)].find_first([&](block* hole) {
    // The lowest unmapped range, with the free block right before it when there is one.
    block* start = hole->prev != nullptr && hole->prev->growable() ? hole->prev : hole;
    if (!has_room(start)) return false;
    found = start;
    return true;
  });
  return found;
}

block* block_store::mark_mapped(block* b, std::size_t bytes) noexcept {
  // reserve() ran before: the unmapped rest needs a block object.
  auto& unmapped = unmapped_[kind_of(b->seg->small)];
  unmapped.erase(b);
  b->mapped = true;
  if (bytes < b->size) {
    block* rest = take_block();
    rest->ptr = b->ptr + bytes;
    rest->size = b->size - bytes;
    rest->seg = b->seg;
    rest->mapped = false;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next != nullptr) rest->next->prev = rest;
    b->next = rest;
    b->size = bytes;
    unmapped.insert(rest);
  }
  (void)merge_free_neighbours(b);
  insert_free(b);
  return b;
}

block* block_store::mark_unmapped(block* b, std::uintptr_t lo, std::size_t bytes) noexcept {
  // reserve() ran before: up to two free pieces around the hole need block objects.
  remove_free(b);
  const std::uintptr_t hi = lo + bytes;
  if (lo > b->ptr) {
    block* before = take_block();
    before->ptr = b->ptr;
    before->size = lo - b->ptr;
    before->seg = b->seg;
    before->hazard_streams = b->hazard_streams;  // still free: same last users
    before->hazard_ticket = b->hazard_ticket;
    before->prev = b->prev;
    before->next = b;
    if (before->prev != nullptr) before->prev->next = before;
    else b->seg->head = before;
    b->prev = before;
    insert_free(before);
  }
  if (b->ptr + b->size > hi) {
    block* after = take_block();
    after->ptr = hi;
    after->size = b->ptr + b->size - hi;
    after->seg = b->seg;
    after->hazard_streams = b->hazard_streams;
    after->hazard_ticket = b->hazard_ticket;
    after->prev = b;
    after->next = b->next;
    if (after->next != nullptr) after->next->prev = after;
    b->next = after;
    insert_free(after);
  }
  b->ptr = lo;
  b->size = bytes;
  b->mapped = false;
  b->hazard_streams = b->hazard_ticket = 0;  // the unmap waited for its users (Note [Moving free pages])
  auto& unmapped = unmapped_[kind_of(b->seg->small)];
  for (block* n : {b->prev, b->next}) {
    if (n == nullptr || n->mapped) continue;
    unmapped.erase(n);
    absorb(b, n);
  }
  unmapped.insert(b);
  return b;
}

}  // namespace streampool::native
