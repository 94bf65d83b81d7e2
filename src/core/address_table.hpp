// address_table.hpp — a map from device address to V for one lock's worth of live allocations: an
// open-addressing table (linear probing, backward-shift deletion, so no tombstones) whose slots
// hold the value itself, so inserting and removing allocate nothing in steady state. Not
// thread-safe: the owner's lock guards it. See Note [Address table].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace streampool::core {

// Note [Address table]
// Every deallocate() looks its pointer up, every allocate() adds one, so the table sits on the hot
// path of a backend. std::unordered_map costs a host malloc and free per entry (its nodes) and a
// pointer chase into a separate bucket array; here an entry is one slot (key and value side by
// side) found by hashing the 512-byte granule number (device allocations are at least 512-byte
// aligned, so the low 9 bits carry nothing) with Fibonacci hashing, probing linearly. The table
// grows by doubling at half load, so probe runs stay short. Deletion shifts later entries of the
// run back into the hole instead of leaving tombstones, so lookups never slow down with churn.
// Key 0 marks an empty slot: no device allocation starts at address 0. Native's per-arena table of
// live blocks is an address_table<block*> (block_map in src/native/stream_arena.hpp).
template <class V>
class address_table {
 public:
  /// Makes room for one more entry. @throws std::bad_alloc (nothing changed then); call it before
  /// changing anything else, so that insert() cannot fail.
  void reserve_one() {
    if ((used_ + 1) * 2 > slots_.size()) grow();
  }
  /// Adds `key` (absent, not 0) with `value`; reserve_one() ran before.
  void insert(std::uintptr_t key, V value) noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(key, mask);
    while (slots_[i].key != 0) i = (i + 1) & mask;
    slots_[i].key = key;
    slots_[i].value = std::move(value);
    ++used_;
  }
  /// Sets `key` (not 0) to `value`, adding it when absent, in one probe; reserve_one() ran before.
  void insert_or_assign(std::uintptr_t key, V value) noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(key, mask);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask;
    used_ += slots_[i].key == 0 ? 1 : 0;
    slots_[i].key = key;
    slots_[i].value = std::move(value);
  }
  [[nodiscard]] V* find(std::uintptr_t key) noexcept {
    const std::size_t i = index_of(key);
    return i == npos ? nullptr : &slots_[i].value;
  }
  [[nodiscard]] const V* find(std::uintptr_t key) const noexcept {
    const std::size_t i = index_of(key);
    return i == npos ? nullptr : &slots_[i].value;
  }
  /// Removes `key` and returns its value; nullopt when absent.
  [[nodiscard]] std::optional<V> take(std::uintptr_t key) noexcept {
    std::size_t hole = index_of(key);
    if (hole == npos) return std::nullopt;
    std::optional<V> out(std::move(slots_[hole].value));
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t j = (hole + 1) & mask; slots_[j].key != 0; j = (j + 1) & mask) {
      const std::size_t k = home(slots_[j].key, mask);
      // The entry at j may move back to the hole unless its home lies cyclically in (hole, j].
      const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
      if (stays) continue;
      slots_[hole].key = slots_[j].key;
      slots_[hole].value = std::move(slots_[j].value);
      hole = j;
    }
    slots_[hole].key = 0;
    slots_[hole].value = V{};  // releases what the moved-from value may still own
    --used_;
    return out;
  }
  /// Calls f(key, value) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const slot& s : slots_) {
      if (s.key != 0) f(s.key, s.value);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return used_; }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};
  struct slot {
    std::uintptr_t key = 0;  ///< 0 = empty
    V value{};
  };

  static std::size_t home(std::uintptr_t key, std::size_t mask) noexcept {
    return static_cast<std::size_t>(((static_cast<std::uint64_t>(key) >> 9) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  }
  [[nodiscard]] std::size_t index_of(std::uintptr_t key) const noexcept {
    if (used_ == 0 || key == 0) return npos;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(key, mask);; i = (i + 1) & mask) {
      if (slots_[i].key == key) return i;
      if (slots_[i].key == 0) return npos;
    }
  }
  // Out of line: the inline reserve_one() of the hot path keeps only its compare (the rehash's
  // registers and stack would otherwise be saved on every call of the function it is inlined in).
  [[gnu::noinline]] void grow() {
    std::vector<slot> old(slots_.empty() ? 16 : slots_.size() * 2);  // may throw: nothing changed
    old.swap(slots_);
    const std::size_t mask = slots_.size() - 1;
    for (slot& s : old) {
      if (s.key == 0) continue;
      std::size_t i = home(s.key, mask);
      while (slots_[i].key != 0) i = (i + 1) & mask;
      slots_[i].key = s.key;
      slots_[i].value = std::move(s.value);
    }
  }

  std::vector<slot> slots_;
  std::size_t used_ = 0;
};

}  // namespace streampool::core
