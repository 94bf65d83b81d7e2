// free_list.cpp — the bitmap searches of small_free_list (see Note [Free-list structures]).
#include "native/free_list.hpp"

#include <bit>

namespace streampool::native {

block* small_free_list::find(std::size_t size) const noexcept {
  const std::size_t first = bin(size);
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

block* small_free_list::largest() const noexcept {
  if (summary_ == 0) return nullptr;
  const std::size_t word = 63 - static_cast<std::size_t>(std::countl_zero(summary_));
  const std::size_t i = word * 64 + 63 - static_cast<std::size_t>(std::countl_zero(words_[word]));
  return bins_[i].leftmost();
}

}  // namespace streampool::native
