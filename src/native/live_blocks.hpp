// live_blocks.hpp — the allocated blocks of one stream arena by device pointer, under the arena
// lock: the newest allocation in a slot of its own, the others in an address_table (Note [Address
// table] in src/core). See Note [Newest live block].
#pragma once

#include <cstdint>

#include "core/address_table.hpp"
#include "native/block.hpp"

namespace streampool::native {

// Note [Newest live block]
// Every allocation added its block to the arena's address table and every free took one out:
// hashing, probing and the backward shift of a deletion, about 50 instructions of a cache-hit
// pair. Most frees are of a recent allocation (a temporary), so the newest allocation stays in a
// slot beside the table and enters it only when the next allocation takes the slot; a free
// compares its pointer with the slot first. Costs: a free of an older block pays one compare
// more, and an allocation while the slot is taken pays the insert it paid before.
class live_blocks {
 public:
  /// Makes sure add() cannot fail. @throws std::bad_alloc (nothing changed then)
  void reserve_one() {
    if (newest_ != nullptr) table_.reserve_one();
  }
  /// Adds allocated block `b` (its pointer absent); reserve_one() ran before.
  void add(block* b) noexcept {
    if (newest_ != nullptr) table_.insert(newest_->ptr, newest_);
    newest_ = b;
  }
  /// Removes and returns the block at `ptr`, or nullptr when there is none.
  [[nodiscard]] block* take(std::uintptr_t ptr) noexcept {
    if (block* b = take_newest(ptr)) [[likely]] return b;
    return table_.take(ptr).value_or(nullptr);
  }
  /// take() of the newest allocation only: nullptr (nothing changed) when `ptr` is not it.
  [[nodiscard]] block* take_newest(std::uintptr_t ptr) noexcept {
    block* b = newest_;
    if (b == nullptr || b->ptr != ptr) [[unlikely]] return nullptr;
    newest_ = nullptr;
    return b;
  }
  [[nodiscard]] block* find(std::uintptr_t ptr) const noexcept {
    if (newest_ != nullptr && newest_->ptr == ptr) return newest_;
    block* const* b = table_.find(ptr);
    return b != nullptr ? *b : nullptr;
  }
  /// Puts back a block take() just returned (a free that failed; Note [Failed frees]): its place
  /// (the slot, or the table's slot it left) is still free, so this cannot fail.
  void put_back(block* b) noexcept {
    if (newest_ == nullptr) {
      newest_ = b;
    } else {
      table_.insert(b->ptr, b);
    }
  }

 private:
  block* newest_ = nullptr;
  core::address_table<block*> table_;
};

}  // namespace streampool::native
