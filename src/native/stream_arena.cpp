// stream_arena.cpp — the per-(device, pool, stream) block logic off the hot path: completing
// frees that waited for events (§2.9) or for a capture (§3.4), and linking segments (malloc'd and
// expandable, §2.13) in and out for the segment source. Best fit, split and merge
// (docs/pytorch-compatibility.md §2.6–§2.8) are in hot_path.cpp, over the arena's block store.
#include "native/stream_arena.hpp"

namespace streampool::native {

stream_arena::stream_arena(device_context& device, stream_t stream, private_pool* pool, mempool_id pool_id)
    : stats_(device.peaks),
      device_(&device),
      stream_(stream),
      pool_(pool),
      pool_id_(pool_id),
      blocks_(*this, device.gc_clock),
      events_(device) {
  device.peaks.link(stats_);  // the device's statistics see this arena from now on (device mutex held)
}

stream_arena::~stream_arena() = default;

void stream_arena::reassign(stream_t stream, private_pool* pool, mempool_id pool_id) noexcept {
  stream_ = stream;
  pool_ = pool;
  pool_id_ = pool_id;
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
