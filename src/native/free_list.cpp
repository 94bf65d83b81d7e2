// free_list.cpp — the in-order successor used by the expandable best-fit rule (docs/pytorch-compatibility.md §2.6) and the
// largest-block search of small_free_list (see Note [Free-list structures]; the hot bitmap search,
// first_from, is inline in free_list.hpp).
#include "native/free_list.hpp"

#include <bit>

namespace streampool::native {

block* small_free_list::next_after(const block* b) const noexcept {
  if (b->size > small_buffer) return overflow_.upper_bound(b);
  const std::size_t i = bin(b->size);
  if (block* same = bins_[i].upper_bound(b)) return same;
  if (block* larger = i + 1 < bin_count ? first_from(i + 1) : nullptr) return larger;
  return overflow_.leftmost();
}

block* small_free_list::largest() const noexcept {
  if (block* big = overflow_.rightmost()) return big;
  if (summary_ == 0) return nullptr;
  const std::size_t word = 63 - static_cast<std::size_t>(std::countl_zero(summary_));
  const std::size_t i = word * 64 + 63 - static_cast<std::size_t>(std::countl_zero(words_[word]));
  return bins_[i].leftmost();
}

}  // namespace streampool::native
