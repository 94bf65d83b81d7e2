// stream_arena.cpp — the per-(device, pool, stream) block logic off the hot path: completing
// frees that waited for events (§2.9) or for a capture (§3.4), and linking segments (malloc'd and
// expandable, §2.13) in and out for the segment source. Best fit, split and merge
// (docs/pytorch-compatibility.md §2.6–§2.8) are in hot_path.cpp, over the arena's block store.
#include "native/stream_arena.hpp"

#include <cstdint>

namespace streampool::native {

stream_arena::stream_arena(device_context& device, stream_t stream, private_pool* pool, mempool_id pool_id)
    : stats_(device.peaks, mutex_),
      device_(&device),
      stream_(stream),
      pool_(pool),
      pool_id_(pool_id),
      blocks_(*this, device.gc_clock),
      events_(device) {
  stats_.set_no_front(pool != nullptr);  // Note [Front block]: private pools park none
  device.peaks.link(stats_);  // the device's statistics see this arena from now on (device mutex held)
}

stream_arena::~stream_arena() = default;

void stream_arena::reassign(stream_t stream, private_pool* pool, mempool_id pool_id) noexcept {
  stream_ = stream;
  pool_ = pool;
  pool_id_ = pool_id;
  set_front_enabled(front_enabled_);  // the pool decides too (Note [Front block])
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

block* stream_arena::allocate_at(std::uintptr_t address, std::size_t bytes) {
  // Note [Allocations at an address] in native_allocator.cpp.
  block* b = nullptr;
  for (segment* seg = segments_; seg != nullptr && b == nullptr; seg = seg->next) {
    if (address < seg->base || address >= seg->base + seg->size) continue;
    for (block* x = seg->head; x != nullptr; x = x->next) {
      if (address >= x->ptr && address < x->ptr + x->size) {
        b = x;
        break;
      }
    }
  }
  if (b == nullptr || !b->in_free_list || !b->mapped || address + bytes > b->ptr + b->size) return nullptr;
  reserve_blocks();  // the two splits below
  const bool small = b->seg->small;
  const bool counts_split = !b->seg->expandable;  // inactive_split ignores expandable blocks (§2.14)
  const bool was_split = b->is_split();
  const auto whole = static_cast<std::int64_t>(b->size);
  std::int64_t pieces = 1;
  blocks_.remove_free(b);
  if (b->ptr < address) {
    block* rest = blocks_.split(b, address - b->ptr);  // `b` stays free before the range
    blocks_.insert_free(b);
    blocks_.remove_free(rest);
    b = rest;
    ++pieces;
  }
  if (b->size > bytes) {
    (void)blocks_.split(b, bytes);  // the rest after the range stays free
    ++pieces;
  }
  // The free block (one inactive split block when it was split) is now `pieces` split blocks; the
  // allocation below counts the range out of them as any hit of a split block does.
  if (counts_split && pieces > 1) {
    stats_.add(arena_stat_kind::inactive_split, small, pieces - (was_split ? 1 : 0));
    if (!was_split) stats_.add(arena_stat_kind::inactive_split_bytes, small, whole);
  }
  return allocate_block(b, bytes, bytes, stream_);
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
  block* b = blocks_.take_block();
  b->ptr = seg->base;
  b->size = seg->size;
  b->seg = seg;
  seg->head = b;
  link_segment(seg);
  return b;
}

void stream_arena::drop_segment(block* b) noexcept {
  blocks_.remove_free(b);
  unlink_segment(b->seg);
  blocks_.recycle(b);
}

segment* stream_arena::release_at_exit() noexcept {
  settle();  // Note [Front block]
  events_.release_all();
  segment* list = segments_;
  segments_ = nullptr;
  segment_count_ = 0;
  return list;
}

// --- expandable segments (Note [Expandable segments] in expandable.hpp) ------------------------------

void stream_arena::attach_expandable(segment* seg) {
  block* b = attach_segment(seg);  // reserve_blocks() ran before
  b->mapped = false;
  blocks_.add_unmapped(b);
}

void stream_arena::detach_expandable(segment* seg) noexcept {
  block* b = seg->head;  // the one unmapped block covering the reservation
  blocks_.erase_unmapped(b);
  unlink_segment(seg);
  blocks_.recycle(b);
}

}  // namespace streampool::native
