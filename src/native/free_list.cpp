// free_list.cpp — the bitmap searches of small_free_list (see Note [Free-list structures]) and the
// in-order successor used by the expandable best-fit rule (spec §2.6).
#include "native/free_list.hpp"

#include <bit>

namespace streampool::native {

block* small_free_list::first_from(std::size_t first) const noexcept {
  std::size_t word = first / 64;
  // Bins >= first in the first word, then the first non-empty word after it.
  std::uint64_t bits = words_[word] & (~std::uint64_t{0} << (first % 64));
  if (bits == 0) {
    const std::uint64_t later = word + 1 < 64 ? summary_ & (~std::uint64_t{0} << (word + 1)) : 0;
    if (later == 0) return nullptr;
    word = static_cast<std::size_t>(std::countr_zero(later));
    bits = words_[word];
  }
  const std::size_t i = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
  return bins_[i].leftmost();
}

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
