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
  split_delta_ = (next_free != nullptr ? -1 : 0) + (merged_is_split ? 1 : 0);
  split_bytes_delta_ = static_cast<std::int64_t>(b->size) - static_cast<std::int64_t>(merged) +
                       (merged_is_split ? static_cast<std::int64_t>(merged) : 0);
}

void front_block::settle_parked() noexcept {
  block* b = parked_;
  parked_ = nullptr;
  (void)blocks_->merge_free_neighbours(b);  // its upper neighbour at most (check)
  b->requested_size = 0;
  blocks_->insert_free(b);
  if (!b->seg->small) b->gc_count_base = gc_stamp_;  // stamped at the free, as the plain free does
}

}  // namespace streampool::native
