// front_block.hpp — the front block of a stream arena: the block its last hot free gave back,
// held aside instead of being merged into the free lists, so that the next allocation of the same
// size on the stream takes it back without touching them (the cache-hit pair of issue 30). Exact:
// the statistics, the addresses handed out and every list another path reads are those of the
// plain free. The arena's methods that park, take and settle it are in hot_path.cpp; this file
// holds the slot and the check that decides whether a block may be parked. See Note [Front block].
#pragma once

#include <cstddef>
#include <cstdint>

#include "native/block.hpp"
#include "native/block_store.hpp"
#include "native/block_treap.hpp"

namespace streampool::native {

// Note [Front block]
// A cache-hit pair on one stream used to free a block into its arena's free lists (merging it with
// its free neighbour, recycling that block object, inserting the merged block) and then allocate
// it again (best fit, removal, split, inserting the rest): about 300 of its 760 instructions moved
// blocks between treaps and bitmaps only to restore the state they started from. Now a hot free
// may park the block instead: it stays detached (allocated == false, in no list) as the arena's
// front block, the statistics and the trace change exactly as for the plain free (so stats() of
// any thread, the device peaks and the trace see the free), and the lists keep the neighbour it
// would have merged with. The next hot allocation of the arena takes it back when the plain path
// would have handed out exactly it: same rounded size, and the merged block M (the block and its
// free neighbour after it) is the best fit for that size and would be split back at the same place.
// The pair then changes the lists not at all, which is what the plain free and allocation did in
// sum.
//
// Which blocks may be parked: a block of the default pool (private pools' allocations never take
// the hot path), not in an expandable segment (its best-fit rule looks at unmapped ranges), of an
// arena without a cross-stream order, whose lower neighbour is not free (M must start at the
// block's address), and for which M is the best fit of the block's own size among the free blocks
// the plain free would leave (the neighbour replaced by M). That last check searches the lists
// (fits_after_merge below, ~40 instructions); its answer is memoised with the block store's
// version, which every list change moves on, so a steady pair pays one compare for it.
//
// Exactness rests on one rule: the front block exists only between a hot free and the next use of
// the arena. Every other path takes the arena lock through arena_mutex::lock(), which first
// settles the front block (the merge and insert the plain free would have made, stamped with the
// GC clock of the free); so do a hot allocation that misses, and a hot free of another block. What
// settling skips are the statistics and the trace, done at the free. A take-back restores the
// counters the free lowered (allocation, its bytes, the inactive-split pair) without a peak check:
// they return to values they held since the last peak reset (which settles), so no peak can move,
// and the plain path's checks would have found nothing. Requested bytes differ per call and keep
// their full update.
//
// What it costs: the arena keeps one more block aside (no memory: the block is free, it is only not
// yet in a list); a hot free of another block while one is parked, and any slow path, pays the
// settle (the old free's work, done later); a parked block's merged neighbour keeps the GC stamp of
// its split until the take-back restamps it. The sleep feature (a pool's memory made unreachable to
// the hot path) needs the front block out of the way too: stream_arena::set_front_enabled(false)
// settles it and keeps frees from parking (a bit of the free's existing flag word, no new check).
struct front_block {
  block* parked = nullptr;     ///< the block, or nullptr
  std::uint64_t gc_stamp = 0;  ///< the GC clock at its free (M's gc_count_base when settled)
  // The memo: what the last check found for block `checked` while the lists were at version
  // `checked_version` (Note [Front block]); the parked block is always the checked one.
  const block* checked = nullptr;
  std::uint64_t checked_version = 0;
  bool checked_ok = false;         ///< it may be parked
  std::size_t merged = 0;          ///< the size of M: the block and its free upper neighbour
  std::int64_t split_delta = 0;    ///< what its free adds to inactive_split (a take-back subtracts it)
  std::int64_t split_bytes_delta = 0;  ///< ... and to inactive_split_bytes
};

/// Would the plain free of `b` (allocated, lower neighbour not free, not expandable) give the
/// best fit for b->size to M, the merged block? `next_free` is b's free upper neighbour (merged
/// into M) or nullptr; `merged` the size of M. Searches the free list of b's pool kind, skipping
/// `next_free`, which the plain free would take out of it.
[[nodiscard]] inline bool fits_after_merge(const block_store& blocks, const block* b, const block* next_free,
                                           std::size_t merged) noexcept {
  const std::size_t size = b->size;
  const bool small = b->seg->small;
  if (small && size > small_size) return false;  // the small lists' search takes sizes up to 1 MiB only
  const block* best = small ? blocks.small_list().find(size) : blocks.large_list().lower_bound(size);
  if (best != nullptr && best == next_free) {
    best = small ? blocks.small_list().next_after(best) : blocks.large_list().next_after(best);
  }
  if (best == nullptr) return true;
  // M = [b->ptr, b->ptr + merged) wins when it comes first in (size, address) order.
  return merged != best->size ? merged < best->size : b->ptr < best->ptr;
}

}  // namespace streampool::native
