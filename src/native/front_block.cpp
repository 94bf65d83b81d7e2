// front_block.cpp — the cold half of the front block (Note [Front block] in front_block.hpp): the
// check whether a freed block may be parked, and the settle that puts a parked block into the free
// lists as the plain free would have.
#include "native/front_block.hpp"

namespace streampool::native {
namespace {

/// Would the plain free of `b` (allocated, lower neighbour not free, not expandable) give the
/// best fit for b->size to M, the merged block? `next_free` is b's free upper neighbour (merged
/// into M) or nullptr; `merged` the size of M. Searches the free list of b's pool kind, skipping
/// `next_free`, which the plain free would take out of it.
[[nodiscard]] bool fits_after_merge(const block_store& blocks, const block* b, const block* next_free,
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

}  // namespace

void front_block::check(const block* b) noexcept {
  checked_ = b;
  checked_version_ = blocks_->version();
  checked_ok_ = false;
  rules_version_ = 0;  // M changes: the rules are asked again (Note [Front block rules])
  const block* prev = b->prev;
  if ((prev != nullptr && prev->in_free_list) || b->seg->expandable) return;
  const block* next = b->next;
  const block* next_free = next != nullptr && next->in_free_list ? next : nullptr;
  const std::size_t merged = b->size + (next_free != nullptr ? next_free->size : 0);
  if (!fits_after_merge(*blocks_, b, next_free, merged)) return;
  // What merge_and_insert would find: the neighbour merged, M split unless it is its whole segment.
  const bool merged_is_split = prev != nullptr || (next_free != nullptr ? next_free->next : next) != nullptr;
  checked_ok_ = true;
  merged_ = merged;
  splits_ = merged != b->size;
  // The share's figures (state is 0: park_checked folded; Note [Front block counters]).
  front_share& share = stats_->share();
  share.size.store(static_cast<std::int64_t>(b->size), std::memory_order_relaxed);
  share.small.store(b->seg->small, std::memory_order_relaxed);
  share.split.store((next_free != nullptr ? -1 : 0) + (merged_is_split ? 1 : 0), std::memory_order_relaxed);
  share.split_bytes.store(static_cast<std::int64_t>(b->size) - static_cast<std::int64_t>(merged) +
                              (merged_is_split ? static_cast<std::int64_t>(merged) : 0),
                          std::memory_order_relaxed);
}

bool front_block::park_checked(block* b) noexcept {
  stats_->fold_share();  // pairs of the old memo (nothing parked here)
  check(b);
  if (!checked_ok_) return false;
  park_unchecked(b);
  // The park's increases, checked as the plain free's add() did, once per memo.
  const front_share& share = stats_->share();
  const bool small = b->seg->small;
  const std::int64_t split = share.split.load(std::memory_order_relaxed);
  const std::int64_t split_bytes = share.split_bytes.load(std::memory_order_relaxed);
  if (split > 0) stats_->check_peak(arena_stat_kind::inactive_split, small, split);
  if (split_bytes > 0) stats_->check_peak(arena_stat_kind::inactive_split_bytes, small, split_bytes);
  return true;
}

void front_block::settle_parked() noexcept {
  stats_->fold_share();  // no value a reader sees changes (Note [Front block counters])
  checked_ = nullptr;    // its peak check holds no longer
  block* b = parked_;
  if (b == nullptr) return;  // pairs only
  parked_ = nullptr;
  (void)blocks_->merge_free_neighbours(b);  // its upper neighbour at most (check)
  b->requested_size = 0;
  blocks_->insert_free(b);
  if (!b->seg->small) b->gc_count_base = gc_stamp_;  // stamped at the free, as the plain free does
}

}  // namespace streampool::native
