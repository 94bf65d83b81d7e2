// arena_table.hpp — stream → default-pool arena of one device, read without a lock on every
// allocation. Insertions (the first allocation on a new stream) happen under the device mutex;
// entries are never removed, and a grown table is published by pointer swap while the old one is
// kept until the table dies, so a reader never sees freed memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "streampool/driver.hpp"

namespace streampool::native {

class stream_arena;

class arena_table {
 public:
  arena_table() { publish(16); }

  [[nodiscard]] stream_arena* find(stream_t stream) const noexcept {
    const table& t = *current_.load(std::memory_order_acquire);
    for (std::size_t i = hash(stream) & t.mask;; i = (i + 1) & t.mask) {
      stream_arena* value = t.slots[i].value.load(std::memory_order_acquire);
      if (value == nullptr) return nullptr;
      if (t.slots[i].key.load(std::memory_order_relaxed) == stream) return value;
    }
  }

  /// Caller holds the device mutex and checked that `stream` is absent.
  void insert(stream_t stream, stream_arena* arena) {
    table* t = current_.load(std::memory_order_relaxed);
    if ((count_ + 1) * 2 > t->mask + 1) {
      table* bigger = publish((t->mask + 1) * 2);
      for (std::size_t i = 0; i <= t->mask; ++i) {
        stream_arena* value = t->slots[i].value.load(std::memory_order_relaxed);
        if (value != nullptr) place(*bigger, t->slots[i].key.load(std::memory_order_relaxed), value);
      }
      current_.store(bigger, std::memory_order_release);
      t = bigger;
    }
    place(*t, stream, arena);
    ++count_;
  }

 private:
  struct slot {
    std::atomic<stream_t> key{nullptr};
    std::atomic<stream_arena*> value{nullptr};
  };
  struct table {
    std::size_t mask = 0;
    std::unique_ptr<slot[]> slots;
  };

  static std::size_t hash(stream_t stream) noexcept {
    return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(stream) * 0x9E3779B97F4A7C15ull) >> 40);
  }
  static void place(table& t, stream_t stream, stream_arena* arena) noexcept {
    std::size_t i = hash(stream) & t.mask;
    while (t.slots[i].value.load(std::memory_order_relaxed) != nullptr) i = (i + 1) & t.mask;
    t.slots[i].key.store(stream, std::memory_order_relaxed);
    t.slots[i].value.store(arena, std::memory_order_release);  // publishes the key too
  }
  table* publish(std::size_t capacity) {
    auto t = std::make_unique<table>();
    t->mask = capacity - 1;
    t->slots = std::make_unique<slot[]>(capacity);
    tables_.push_back(std::move(t));
    if (tables_.size() == 1) current_.store(tables_.back().get(), std::memory_order_release);
    return tables_.back().get();
  }

  std::atomic<table*> current_{nullptr};
  std::vector<std::unique_ptr<table>> tables_;  // every table ever published (see file comment)
  std::size_t count_ = 0;
};

}  // namespace streampool::native
