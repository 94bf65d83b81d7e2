// native_snapshot.cpp — the segments and blocks of one device for memory_snapshot (docs/pytorch-compatibility.md §2.15),
// taken under the device mutex and every arena lock so they agree with stats() (docs/pytorch-compatibility.md §2.14
// invariant: current values equal sums over the snapshot). An expandable segment is reported as
// one segment per contiguous mapped range, with is_expandable set (docs/pytorch-compatibility.md §2.13); the pages of
// expandable segments held outside every segment are listed as leftover pages, so that segments
// plus leftover pages add up to reserved_bytes (Note [Leftover pages] in expandable.hpp).
#include "native/device_state.hpp"

namespace streampool::native {
namespace {

segment_info start_segment(int device, const stream_arena& a, const segment& seg, const block* first) {
  segment_info info;
  info.device = device;
  info.address = first->ptr;
  info.stream = a.stream();
  info.is_large = !seg.small;
  info.pool = a.pool_id();
  info.is_expandable = seg.expandable;
  return info;
}

void add_block(segment_info& info, const block* b) {
  block_info bi;
  bi.address = b->ptr;
  bi.size = b->size;
  bi.requested_size = b->requested_size;
  if (b->allocated) {
    bi.state = block_state::active_allocated;
    info.allocated_size += b->size;
  } else if (!b->in_free_list) {
    bi.state = block_state::active_pending_free;  // events pending or deferred by a capture
  } else {
    bi.state = block_state::inactive;
  }
  if (bi.state != block_state::inactive) {
    info.active_size += b->size;
    info.requested_size += b->requested_size;
  }
  info.total_size += b->size;
  info.blocks.push_back(bi);
}

}  // namespace

void device_state::append_segments(std::vector<segment_info>& out) {
  std::lock_guard lock(mutex_);
  append_segments_locked(out);
}

void device_state::append_snapshot(memory_snapshot& out) {
  std::lock_guard lock(mutex_);
  append_segments_locked(out.segments);
  append_leftovers_locked(out.leftover_pages);
}

void device_state::append_segments_locked(std::vector<segment_info>& out) {
  auto locks = lock_arenas(nullptr);
  for (auto& a : arenas_) {
    for (const segment* seg = a->segments(); seg != nullptr; seg = seg->next) {
      // Runs of mapped blocks; a malloc'd segment is one run of blocks that are all mapped.
      for (const block* b = seg->head; b != nullptr;) {
        if (!b->mapped) {
          b = b->next;
          continue;
        }
        segment_info info = start_segment(index_, *a, *seg, b);
        for (; b != nullptr && b->mapped; b = b->next) add_block(info, b);
        out.push_back(std::move(info));
      }
    }
  }
}

void device_state::append_leftovers_locked(std::vector<leftover_page_info>& out) const {
  // Pages counted in reserved_bytes that no segment lists (Note [Leftover pages]).
  for (const leftover_page& page : leftovers_) {
    out.push_back({index_, page.va, page.bytes, !page.small});
  }
}

}  // namespace streampool::native
