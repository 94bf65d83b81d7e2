// native_snapshot.cpp — the segments and blocks of one device for memory_snapshot (spec §2.15),
// taken under the device mutex and every arena lock so they agree with stats() (spec §2.14
// invariant: current values equal sums over the snapshot).
#include "native/device_state.hpp"

namespace streampool::native {

void device_state::append_segments(std::vector<segment_info>& out) {
  std::lock_guard lock(mutex_);
  auto locks = lock_arenas(nullptr);
  for (auto& a : arenas_) {
    for (const segment* seg = a->segments(); seg != nullptr; seg = seg->next) {
      segment_info info;
      info.device = index_;
      info.address = seg->base;
      info.total_size = seg->size;
      info.stream = a->stream();
      info.is_large = !seg->small;
      info.pool = a->pool_id();
      info.is_expandable = false;
      for (const block* b = seg->head; b != nullptr; b = b->next) {
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
        info.blocks.push_back(bi);
      }
      out.push_back(std::move(info));
    }
  }
}

}  // namespace streampool::native
