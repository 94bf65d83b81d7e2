// release.cpp — the paths that give memory back to the driver (docs/pytorch-compatibility.md §2.10–§2.12): garbage
// collection of old unsplit blocks, release_available_cached_blocks (max_split_size set),
// release_cached_blocks (= empty_cache: sync events, free every unsplit free segment and unmap
// the free pages of expandable segments, in the default pools and in freeable private pools, then
// the deletion of dead private pools: capture_arenas.cpp). GC and release_available skip
// expandable blocks (docs/pytorch-compatibility.md §2.13). All run under the device mutex (Note [Lock order] in
// device_state.hpp).
#include <algorithm>
#include <vector>

#include "native/device_state.hpp"

namespace streampool::native {
namespace {

/// True for a free block that is a whole malloc'd segment (never one of an expandable segment).
bool whole_segment(const block* b) noexcept { return !b->is_split() && !b->seg->expandable; }

/// Unsplit free blocks of `a` (whole free segments), small and large.
std::vector<block*> unsplit_free_blocks(const stream_arena& a) {
  std::vector<block*> out;
  auto take = [&](block* b) {
    if (whole_segment(b)) out.push_back(b);
  };
  a.small_blocks().for_each(take);
  a.large_blocks().for_each(take);
  return out;
}

}  // namespace

void device_state::garbage_collect(const stream_arena* held) {
  // docs/pytorch-compatibility.md §2.11: only with a fraction cap; frees unsplit blocks of the default large pool, oldest
  // (by the large-pool search clock) first, until reserved <= threshold × allowed.
  const std::size_t allowed = allowed_bytes();
  const auto threshold = static_cast<std::size_t>(config_->garbage_collection_threshold * static_cast<double>(allowed));
  const auto reserved = static_cast<std::size_t>(counters_.reserved_bytes[0].current);
  if (reserved <= threshold) return;
  const std::size_t target = reserved - threshold;

  auto locks = lock_arenas(held);
  struct candidate {
    stream_arena* arena;
    block* b;
    std::uint64_t age;
    bool released;
  };
  std::vector<candidate> candidates;
  const std::uint64_t clock = gc_clock.load(std::memory_order_relaxed);
  for (auto& a : arenas_) {
    if (a->pool() != nullptr) continue;
    a->large_blocks().for_each([&](block* b) {
      if (whole_segment(b)) candidates.push_back({a.get(), b, clock - b->gc_count_base, false});
    });
  }
  double total_age = 0;
  for (const candidate& c : candidates) total_age += static_cast<double>(c.age);
  std::size_t remaining = candidates.size();
  std::size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && remaining > 0) {
    const double average = total_age / static_cast<double>(remaining);
    freed = false;
    for (candidate& c : candidates) {
      if (c.released || static_cast<double>(c.age) < average) continue;
      c.released = true;
      freed = true;
      reclaimed += c.b->size;
      total_age -= static_cast<double>(c.age);
      --remaining;
      release_block(*c.arena, c.b);
    }
  }
}

bool device_state::release_available(stream_arena& a, std::size_t rounded) {
  // docs/pytorch-compatibility.md §2.10 release_available_cached_blocks, on the allocation's own arena (same stream, same
  // pool). Oversize blocks are whole segments; a split one (possible with a large
  // large_segment_size) is skipped.
  const std::size_t max_split = policy_->max_split_size();
  const std::size_t key = std::max(rounded, max_split);
  std::vector<block*> oversize;  // ascending (size, address)
  a.large_blocks().for_each([&](block* b) {
    if (b->size >= max_split && whole_segment(b)) oversize.push_back(b);
  });
  const auto first_fit = std::find_if(oversize.begin(), oversize.end(), [&](block* b) { return b->size >= key; });
  if (first_fit != oversize.end()) {
    release_block(a, *first_fit);
    return true;
  }
  std::size_t released = 0;
  while (released < key && !oversize.empty()) {
    block* b = oversize.back();
    oversize.pop_back();
    released += b->size;
    release_block(a, b);
  }
  return released >= key;
}

void device_state::release_cached(const stream_arena* held) {
  process_deferred(held);
  synchronize_all_events(held);
  release_leftovers();  // Note [Leftover pages] in expandable.hpp
  for (auto& a : arenas_) {
    std::unique_lock<hybrid_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->pool() != nullptr && !a->pool()->freeable()) continue;
    for (block* b : unsplit_free_blocks(*a)) release_block(*a, b);
    unmap_free_pages(*a);  // expandable segments: every wholly free page (docs/pytorch-compatibility.md §2.13)
  }
  delete_dead_pools();
}

bool device_state::empty_cache() {
  std::lock_guard lock(mutex_);
  // Note [Deferred frees during capture]: no event sync or cudaFree while a capture is underway.
  if (capture_underway()) return false;
  release_cached(nullptr);
  return true;
}

}  // namespace streampool::native
