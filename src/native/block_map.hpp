// block_map.hpp — device pointer → block of the live allocations of one stream arena, changed and
// read under the arena lock: an open-addressing table (linear probing, backward-shift deletion,
// so no tombstones and no allocation in steady state). See Note [Pointer lookup] in
// segment_map.hpp for why it lives in the arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "native/block.hpp"

namespace streampool::native {

class block_map {
 public:
  /// Makes room for one more entry. @throws std::bad_alloc; run before changing anything else.
  void reserve_one() {
    if ((used_ + 1) * 2 > slots_.size()) grow();
  }
  /// Adds `b` (its pointer must be absent); reserve_one() ran before.
  void insert(block* b) noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(b->ptr, mask);
    while (slots_[i].key != 0) i = (i + 1) & mask;
    slots_[i] = {b->ptr, b};
    ++used_;
  }
  [[nodiscard]] block* find(std::uintptr_t ptr) const noexcept {
    const std::size_t i = index_of(ptr);
    return i == npos ? nullptr : slots_[i].value;
  }
  /// Removes `ptr` and returns its block, or nullptr when absent.
  [[nodiscard]] block* erase(std::uintptr_t ptr) noexcept {
    std::size_t hole = index_of(ptr);
    if (hole == npos) return nullptr;
    block* b = slots_[hole].value;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t j = (hole + 1) & mask; slots_[j].key != 0; j = (j + 1) & mask) {
      const std::size_t k = home(slots_[j].key, mask);
      // The entry at j may move back to the hole unless its home lies cyclically in (hole, j].
      const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole] = {};
    --used_;
    return b;
  }
  [[nodiscard]] std::size_t size() const noexcept { return used_; }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};
  struct entry {
    std::uintptr_t key = 0;  // 0 = empty (device pointers are never 0)
    block* value = nullptr;
  };

  static std::size_t home(std::uintptr_t ptr, std::size_t mask) noexcept {
    return static_cast<std::size_t>(((ptr >> 9) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  }
  [[nodiscard]] std::size_t index_of(std::uintptr_t ptr) const noexcept {
    if (used_ == 0) return npos;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(ptr, mask);; i = (i + 1) & mask) {
      if (slots_[i].key == ptr) return i;
      if (slots_[i].key == 0) return npos;
    }
  }
  void grow() {
    std::vector<entry> old(slots_.empty() ? 16 : slots_.size() * 2);
    old.swap(slots_);
    const std::size_t mask = slots_.size() - 1;
    for (const entry& e : old) {
      if (e.key == 0) continue;
      std::size_t i = home(e.key, mask);
      while (slots_[i].key != 0) i = (i + 1) & mask;
      slots_[i] = e;
    }
  }

  std::vector<entry> slots_;
  std::size_t used_ = 0;
};

}  // namespace streampool::native
