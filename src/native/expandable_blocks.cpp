// expandable_blocks.cpp — the block side of expandable segments (Note [Expandable segments] in
// expandable.hpp): linking a reservation in, finding where to grow (docs/pytorch-compatibility.md §2.13
// find_expandable_block), turning unmapped blocks into free ones and back, the expandable
// best-fit rule of docs/pytorch-compatibility.md §2.6, and the teardown at allocator exit. No driver call here except in
// the teardown; expandable.cpp makes them.
#include "native/device_state.hpp"
#include "native/expandable.hpp"

namespace streampool::native {
namespace {

constexpr std::size_t kind_of(bool small) noexcept { return small ? 0 : 1; }

/// The block's size plus the unmapped range right after it ("expandable size", docs/pytorch-compatibility.md §2.6).
std::size_t reach(const block* b) noexcept {
  return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
}

}  // namespace

block* stream_arena::prefer_without_tail(block* b, bool small) const noexcept {
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

void stream_arena::attach_expandable(segment* seg) {
  block* b = attach_segment(seg);  // reserve_blocks() ran before
  b->mapped = false;
  unmapped_[kind_of(seg->small)].insert(b);
}

block* stream_arena::find_growable(bool small, std::size_t size) const {
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

block* stream_arena::mark_mapped(block* b, std::size_t bytes) noexcept {
  // reserve_blocks() ran before: the unmapped rest needs a block object.
  auto& unmapped = unmapped_[kind_of(b->seg->small)];
  unmapped.erase(b);
  b->mapped = true;
  if (bytes < b->size) {
    block* rest = new_block();
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
  for (block* n : {b->prev, b->next}) {
    if (n == nullptr || !n->in_free_list) continue;
    remove_free(n);
    absorb(b, n);
  }
  insert_free(b);
  return b;
}

block* stream_arena::mark_unmapped(block* b, std::uintptr_t lo, std::size_t bytes) noexcept {
  // reserve_blocks() ran before: up to two free pieces around the hole need block objects.
  remove_free(b);
  const std::uintptr_t hi = lo + bytes;
  if (lo > b->ptr) {
    block* before = new_block();
    before->ptr = b->ptr;
    before->size = lo - b->ptr;
    before->seg = b->seg;
    before->prev = b->prev;
    before->next = b;
    if (before->prev != nullptr) before->prev->next = before;
    else b->seg->head = before;
    b->prev = before;
    insert_free(before);
  }
  if (b->ptr + b->size > hi) {
    block* after = new_block();
    after->ptr = hi;
    after->size = b->ptr + b->size - hi;
    after->seg = b->seg;
    after->prev = b;
    after->next = b->next;
    if (after->next != nullptr) after->next->prev = after;
    b->next = after;
    insert_free(after);
  }
  b->ptr = lo;
  b->size = bytes;
  b->mapped = false;
  auto& unmapped = unmapped_[kind_of(b->seg->small)];
  for (block* n : {b->prev, b->next}) {
    if (n == nullptr || n->mapped) continue;
    unmapped.erase(n);
    absorb(b, n);
  }
  unmapped.insert(b);
  return b;
}

void stream_arena::detach_expandable(segment* seg) noexcept {
  block* b = seg->head;  // the one unmapped block covering the reservation
  unmapped_[kind_of(seg->small)].erase(b);
  unlink_segment(seg);
  recycle(b);
}

void stream_arena::release_expandable_at_exit(segment* seg) noexcept {
  // Status form: the allocator is going away. Unmap does not synchronise; wait for the device
  // (the arena's stream may be gone by now, the device is always valid).
  driver& drv = device_->drv();
  if (seg->mapped_pages != 0) (void)drv.device_synchronize(device_->index());
  for (std::size_t i = 0; i < seg->handles.size(); ++i) {
    if (seg->handles[i] == 0) continue;
    (void)drv.vmm_unmap(reinterpret_cast<void*>(seg->base + i * seg->page), seg->page);
    if (seg->handles[i] != released_handle) (void)drv.vmm_release(seg->handles[i]);
  }
  (void)drv.vmm_free(reinterpret_cast<void*>(seg->base), seg->size);
}

}  // namespace streampool::native
