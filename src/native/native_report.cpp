// native_report.cpp — what the native backend reports about its arenas: the segments and blocks
// of a snapshot, the arena figures of an out-of-memory message and the sentences such a message
// gets during a capture. Free functions over arenas the caller has locked; device_state decides
// when (device_state.cpp, oom_ladder.cpp).
#include "native/native_report.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "core/format.hpp"

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
  info.is_asleep = seg.asleep;
  info.page_size = seg.expandable ? seg.page : 0;
  return info;
}

void add_block(segment_info& info, const block* b) {
  block_info bi;
  bi.address = b->ptr;
  bi.size = b->size;
  bi.requested_size = b->requested_size;
  bi.stream = b->stream != nullptr ? b->stream : info.stream;  // never allocated yet: the segment's
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

void append_arena_segments(int device, const stream_arena& a, std::vector<segment_info>& out) {
  // An expandable segment is one segment per contiguous mapped range, with is_expandable set
  // (docs/pytorch-compatibility.md §2.13); a malloc'd segment is one run of blocks, all mapped.
  for (const segment* seg = a.segments(); seg != nullptr; seg = seg->next) {
    for (const block* b = seg->head; b != nullptr;) {
      if (!b->mapped) {
        b = b->next;
        continue;
      }
      segment_info info = start_segment(device, a, *seg, b);
      for (; b != nullptr && b->mapped; b = b->next) add_block(info, b);
      out.push_back(std::move(info));
    }
  }
}

void add_arena_figures(const std::vector<std::unique_ptr<stream_arena>>& arenas, core::oom_figures& f) {
  std::map<stream_t, std::size_t> per_stream;
  for (const auto& arena : arenas) {
    f.allocated += static_cast<std::size_t>(
        arena->counters().current(stat_index(arena_stat_kind::allocated_bytes, stat_pool::all)));
    const block_store& blocks = arena->blocks();
    if (arena->pool() != nullptr) f.private_pool_free += blocks.free_bytes();
    if (blocks.free_bytes() != 0) per_stream[arena->stream()] += blocks.free_bytes();
    if (const block* largest = blocks.largest_free()) {
      f.largest_free_block = std::max(f.largest_free_block, largest->size);
    }
  }
  f.cached_per_stream.assign(per_stream.begin(), per_stream.end());
}

// Note [OOM during capture]
// An OOM while a capture is underway differs from any other in two ways the user needs to know:
// the ladder skipped every step that releases cached memory (cudaFree and event synchronisation
// are illegal during a capture, Note [Deferred frees during capture]), and the request was routed
// to a private pool, whose memory only that pool can use. Users also fear that the failed
// allocation broke the capture; it did not: the new-segment attempt runs in relaxed capture mode
// and the figures above come from calls that are legal during a capture, so nothing invalidated
// it (tested on the sim, whose captures are invalidated by any illegal call). The note says so,
// names the pool, and says what helps.
std::string capture_oom_note(int device, const stream_arena& a) {
  const std::string stream = core::format_pointer(a.stream());
  if (a.pool() != nullptr) {
    const mempool_id id = a.pool_id();
    return " This allocation was made during a CUDA graph capture, on stream " + stream + " into private pool {" +
           std::to_string(id.first) + ", " + std::to_string(id.second) +
           "}: while a capture is underway streampool releases no cached memory (cudaFree is illegal then), so only "
           "that pool's free blocks and new device memory could serve it. The capture is still usable: nothing "
           "was issued that invalidates it, so you may catch this error, free memory and retry, or end the capture "
           "normally. To avoid it, free cached memory before capturing (empty_cache()), or capture less at once.";
  }
  return " A CUDA graph capture is underway on device " + std::to_string(device) +
         ", so streampool released no cached memory for this request on stream " + stream +
         " (cudaFree is illegal during a capture); the capture is still usable, and the same request may "
         "succeed after the capture ends.";
}

}  // namespace streampool::native
