// stream_arena.cpp — the per-(device, pool, stream) block logic off the hot path: completing
// frees that waited for events (§2.9) or for a capture (§3.4), linking segments in and out for the
// segment source, and the block side of expandable segments (§2.13). Best fit, split and merge
// (docs/pytorch-compatibility.md §2.6–§2.8) are in hot_path.cpp.
#include "native/stream_arena.hpp"

namespace streampool::native {
namespace {

constexpr std::size_t kind_of(bool small) noexcept { return small ? 0 : 1; }

/// The block's size plus the unmapped range right after it ("expandable size", docs/pytorch-compatibility.md §2.6).
std::size_t reach(const block* b) noexcept {
  return b->size + (b->next != nullptr && !b->next->mapped ? b->next->size : 0);
}

}  // namespace

stream_arena::stream_arena(device_context& device, stream_t stream, private_pool* pool, mempool_id pool_id)
    : stats_(device.peaks), device_(&device), stream_(stream), pool_(pool), pool_id_(pool_id), events_(device) {
  device.peaks.link(stats_);  // the device's statistics see this arena from now on (device mutex held)
}

stream_arena::~stream_arena() = default;

void stream_arena::reassign(stream_t stream, private_pool* pool, mempool_id pool_id) noexcept {
  stream_ = stream;
  pool_ = pool;
  pool_id_ = pool_id;
}

// --- blocks and free lists ----------------------------------------------------------------------

block* stream_arena::largest_free() const noexcept {
  block* big = large_.largest();
  block* small = small_.largest();
  if (big == nullptr) return small;
  if (small == nullptr) return big;
  return big->size >= small->size ? big : small;
}

// --- frees that waited (docs/pytorch-compatibility.md §2.9, §3.4) ---------------------------------------------------------

void stream_arena::process_events() {
  events_.poll([this](block* b) { complete_pending(b); });
}

void stream_arena::synchronize_events() {
  events_.synchronize([this](block* b) { complete_pending(b); });
}

void stream_arena::complete_deferred(block* b) {
  b->uses.drop_capture_uses();  // the capture's own stream order covers them (docs/pytorch-compatibility.md §3.4)
  if (b->uses.empty()) {
    b->deferred = false;
    complete_pending(b);
    return;
  }
  events_.record(b);  // all or nothing (Note [Failed frees] in event_queues.cpp)
  b->deferred = false;
}

// --- segments ---------------------------------------------------------------------------------------

void stream_arena::link_segment(segment* seg) noexcept {
  seg->arena = this;
  seg->prev = nullptr;
  seg->next = segments_;
  if (segments_ != nullptr) segments_->prev = seg;
  segments_ = seg;
  ++segment_count_;
}

void stream_arena::unlink_segment(segment* seg) noexcept {
  if (seg->prev != nullptr) seg->prev->next = seg->next;
  else segments_ = seg->next;
  if (seg->next != nullptr) seg->next->prev = seg->prev;
  --segment_count_;
}

block* stream_arena::attach_segment(segment* seg) {
  block* b = new_block();
  b->ptr = seg->base;
  b->size = seg->size;
  b->seg = seg;
  seg->head = b;
  link_segment(seg);
  return b;
}

void stream_arena::drop_segment(block* b) noexcept {
  remove_free(b);
  unlink_segment(b->seg);
  recycle(b);
}

segment* stream_arena::release_at_exit() noexcept {
  events_.release_all();
  segment* list = segments_;
  segments_ = nullptr;
  segment_count_ = 0;
  return list;
}

// --- expandable segments (Note [Expandable segments] in expandable.hpp) ------------------------------

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
    block* after = new_block();
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

void stream_arena::detach_expandable(segment* seg) noexcept {
  block* b = seg->head;  // the one unmapped block covering the reservation
  unmapped_[kind_of(seg->small)].erase(b);
  unlink_segment(seg);
  recycle(b);
}

}  // namespace streampool::native
