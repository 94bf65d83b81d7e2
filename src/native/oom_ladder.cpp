// oom_ladder.cpp — an allocation that found no free block (docs/pytorch-compatibility.md §2.3 steps 4–5): garbage
// collection, a new segment (or expandable growth), release of oversize blocks, release of
// everything cached and a retry, and finally the out-of-memory error with the figures of Note
// [OOM message] (plus Note [OOM during capture] when a capture is underway).
#include <map>
#include <string>

#include "core/format.hpp"
#include "core/oom_message.hpp"
#include "native/device_state.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

block* device_state::allocate_slow(stream_arena& a, std::size_t rounded, std::size_t requested) {
  const bool small = size_policy::is_small(rounded);
  const std::size_t alloc_size = policy_->allocation_size(rounded);
  // Note [Deferred frees during capture]: while a capture is underway nothing may cudaFree or
  // query/synchronise events, so the steps that release memory are skipped (PyTorch skips only
  // the last one; its GC and oversize release would call cudaFree during the capture).
  const bool capture = capture_underway();
  if (!capture && gc_enabled()) garbage_collect(&a);
  // grow(): a new segment, or expandable growth (Note [Expandable segments] in expandable.hpp).
  block* b = grow(a, rounded, small);
  if (b == nullptr && !capture && !small && policy_->max_split_set() && release_available(a, rounded)) {
    b = grow(a, rounded, small);
  }
  if (b == nullptr && !capture) {
    release_cached(&a);
    ++counters_.num_alloc_retries;
    b = grow(a, rounded, small);
  }
  if (b == nullptr) throw_oom(a, requested, rounded, alloc_size);
  return a.allocate_block(b, rounded, requested);
}

void device_state::throw_oom(stream_arena& a, std::size_t requested, std::size_t rounded, std::size_t alloc_size) {
  detail::oom_figures f;
  f.device = index_;
  f.requested = requested;
  f.alloc_size = alloc_size;
  if (!driver_->mem_get_info(index_, &f.device_free, &f.device_total).ok()) {
    f.device_free = 0;
    f.device_total = total_memory_;
  }
  f.allowed = allowed_bytes();
  f.reserved = static_cast<std::size_t>(counters_.reserved_bytes[0].current);
  f.expandable_segments = config_->expandable_segments;
  f.max_split_size_set = policy_->max_split_set();
  f.backend = "native";
  {
    auto locks = lock_arenas(&a);
    std::map<stream_t, std::size_t> per_stream;
    for (auto& arena : arenas_) {
      f.allocated += static_cast<std::size_t>(arena->current(stat_index(arena_stat_kind::allocated_bytes, stat_pool::all)));
      if (arena->pool() != nullptr) f.private_pool_free += arena->free_bytes();
      if (arena->free_bytes() != 0) per_stream[arena->stream()] += arena->free_bytes();
      if (const block* largest = arena->largest_free()) {
        f.largest_free_block = std::max(f.largest_free_block, largest->size);
      }
    }
    f.cached_per_stream.assign(per_stream.begin(), per_stream.end());
  }
  trace_.record(trace_action::oom, index_, f.device_free, rounded, a.stream(), a.pool_id());
  ++counters_.num_ooms;
  std::string message = detail::build_oom_message(f);
  if (capture_underway()) message += capture_oom_note(a);
  throw out_of_memory(std::move(message), requested, index_);
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
std::string device_state::capture_oom_note(const stream_arena& a) const {
  const std::string stream = detail::format_pointer(a.stream());
  if (a.pool() != nullptr) {
    const mempool_id id = a.pool_id();
    return " This allocation was made during a CUDA graph capture, on stream " + stream + " into private pool {" +
           std::to_string(id.first) + ", " + std::to_string(id.second) +
           "}: while a capture is underway streampool releases no cached memory (cudaFree is illegal then), so only "
           "that pool's free blocks and new device memory could serve it. The capture is still usable: nothing "
           "was issued that invalidates it, so you may catch this error, free memory and retry, or end the capture "
           "normally. To avoid it, free cached memory before capturing (empty_cache()), or capture less at once.";
  }
  return " A CUDA graph capture is underway on device " + std::to_string(index_) +
         ", so streampool released no cached memory for this request on stream " + stream +
         " (cudaFree is illegal during a capture); the capture is still usable, and the same request may "
         "succeed after the capture ends.";
}

}  // namespace streampool::native
