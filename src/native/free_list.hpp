// free_list.hpp — the free blocks of one arena's pool kind.
//   small_free_list: 4096 exact size bins (512 B .. 2 MiB), a two-level bitmap to find the first
//     non-empty bin >= the request in O(1), each bin an address-ordered treap; blocks above 2 MiB
//     (only merged pages of small expandable segments) in one (size, address) treap.
//   large_free_list: one treap ordered by (size, address).
// Both give docs/pytorch-compatibility.md §2.6 best fit: the smallest block >= the request, the lowest address among equals.
// See Note [Free-list structures].
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "native/block_treap.hpp"
#include "native/size_rounding.hpp"

namespace streampool::native {

// Note [Free-list structures]
// PyTorch keeps each pool in a std::set ordered by (stream, size, address): a node allocation on
// every insert and an O(log n) walk over every stream's blocks. Our lists are per arena, i.e. per
// stream already, and intrusive (the tree hooks live in the block), so no insert allocates.
// Small-pool blocks are at most one 2 MiB segment, i.e. 4096 sizes: an exact bin per size, found
// through a 64-word bitmap plus a summary word, makes the search O(1) whatever the number of free
// blocks; the bin is ordered by address so ties still go to the lowest address. Large blocks have
// unbounded sizes, so they live in one treap ordered by (size, address); lower_bound is the best
// fit. A treap (priority = address hash) was chosen over a red-black tree for its short code.
// Free blocks of a small-pool expandable segment can span several 2 MiB pages; they go to an
// overflow treap ordered like the large list, searched only when no bin has a block.
class small_free_list {
 public:
  static constexpr std::size_t bin_count = small_buffer / min_block_size;

  void insert(block* b) noexcept {
    if (b->size > small_buffer) [[unlikely]] {
      overflow_.insert(b);
      return;
    }
    const std::size_t i = bin(b->size);
    bins_[i].insert(b);
    words_[i / 64] |= std::uint64_t{1} << (i % 64);
    summary_ |= std::uint64_t{1} << (i / 64);
  }
  void erase(block* b) noexcept {
    if (b->size > small_buffer) [[unlikely]] {
      overflow_.erase(b);
      return;
    }
    const std::size_t i = bin(b->size);
    bins_[i].erase(b);
    if (bins_[i].empty()) {
      words_[i / 64] &= ~(std::uint64_t{1} << (i % 64));
      if (words_[i / 64] == 0) summary_ &= ~(std::uint64_t{1} << (i / 64));
    }
  }
  /// Best fit for `size` (a multiple of 512, <= 1 MiB), not removed. nullptr when none.
  [[nodiscard]] block* find(std::size_t size) const noexcept {
    block* b = first_from(bin(size));
    return b != nullptr ? b : overflow_.leftmost();
  }
  /// The block after `b` (in the list) in (size, address) order, or nullptr.
  [[nodiscard]] block* next_after(const block* b) const noexcept;
  [[nodiscard]] block* largest() const noexcept;
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& b : bins_) b.for_each(f);
    overflow_.for_each(f);
  }

 private:
  static std::size_t bin(std::size_t size) noexcept { return size / min_block_size - 1; }
  /// Lowest-address block of the first non-empty bin >= `first` (< bin_count), or nullptr.
  /// Inline: it is on every small-pool cache hit.
  [[nodiscard]] block* first_from(std::size_t first) const noexcept {
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

  std::array<block_treap<by_address>, bin_count> bins_{};
  std::array<std::uint64_t, bin_count / 64> words_{};
  std::uint64_t summary_ = 0;
  block_treap<by_size_address> overflow_;
};

class large_free_list {
 public:
  void insert(block* b) noexcept { tree_.insert(b); }
  void erase(block* b) noexcept { tree_.erase(b); }
  /// Best fit for `size` under the oversize rules of `policy` (docs/pytorch-compatibility.md §2.6), not removed.
  [[nodiscard]] block* find(std::size_t size, const size_policy& policy) const noexcept {
    block* b = tree_.lower_bound_size(size);
    return b != nullptr && policy.may_reuse(b->size, size) ? b : nullptr;
  }
  [[nodiscard]] block* lower_bound(std::size_t size) const noexcept { return tree_.lower_bound_size(size); }
  /// The block after `b` (in the list) in (size, address) order, or nullptr.
  [[nodiscard]] block* next_after(const block* b) const noexcept { return tree_.upper_bound(b); }
  [[nodiscard]] block* largest() const noexcept { return tree_.rightmost(); }
  template <typename F>
  void for_each(F&& f) const {
    tree_.for_each(f);
  }

 private:
  block_treap<by_size_address> tree_;
};

}  // namespace streampool::native
