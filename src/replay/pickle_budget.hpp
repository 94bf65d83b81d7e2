// src/replay/pickle_budget.hpp — what the pickle reader may hold (Note [Bounded by what it holds]
// in pickle_budget.cpp): counters of the stack, the containers and items kept, the bytes of
// strings kept and the memo, checked against pickle_limits, each refusal one message naming the
// input and the byte; and the memo itself (pickle_memo), dense and sparse indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "replay/pickle_input.hpp"
#include "replay/pickle_reader.hpp"

namespace streampool::replay_impl {

class pickle_budget {
 public:
  pickle_budget(const pickle_input& in, const pickle_limits& limits) : in_(in), limits_(limits) {}

  /// Before a value is pushed onto a stack of `size` values.
  void push(std::size_t size) const;
  /// Before a MARK is pushed onto `marks` open ones.
  void mark(std::size_t marks) const;
  /// `n` items (or containers) kept more; fewer when released.
  void keep(std::size_t n);
  void unkeep(std::size_t n) noexcept { kept_items_ -= n < kept_items_ ? n : kept_items_; }
  /// A long string of `length` bytes about to be kept.
  void keep_text(std::uint64_t length);
  /// A value was built (not a DUP or a memo reference): the memo may grow by one more.
  void built() noexcept { ++values_built_; }
  /// Before the memo grows beyond `entries`.
  void memo(std::size_t entries) const;
  void handed_over() noexcept { ++handed_over_; }

 private:
  [[noreturn]] void refuse(const std::string& what) const;

  const pickle_input& in_;
  pickle_limits limits_;
  std::size_t kept_items_ = 0;    ///< items in built containers, and the containers themselves
  std::uint64_t kept_text_ = 0;   ///< bytes of long strings kept
  std::size_t handed_over_ = 0;   ///< items given to the stream callback
  std::size_t values_built_ = 0;  ///< values pushed by opcodes that make one
};

/// The memo: indices stored in order (as picklers write them) in a vector, others in a map.
class pickle_memo {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return dense_.size() + sparse_.size(); }
  [[nodiscard]] std::size_t next() const noexcept { return dense_.size(); }  ///< MEMOIZE's index
  [[nodiscard]] bool has(std::uint64_t index) const {
    return index < dense_.size() || sparse_.find(index) != sparse_.end();
  }
  void put(std::uint64_t index, const pickle_value& v) {
    if (index < dense_.size()) dense_[index] = v;
    else if (index == dense_.size()) dense_.push_back(v);
    else sparse_[index] = v;
  }
  [[nodiscard]] std::optional<pickle_value> get(std::uint64_t index) const {
    if (index < dense_.size()) return dense_[index];
    if (const auto it = sparse_.find(index); it != sparse_.end()) return it->second;
    return std::nullopt;
  }
  /// Replaces the entry at `index`, when there is one.
  void replace(std::uint64_t index, const pickle_value& v) {
    if (has(index)) put(index, v);
  }

 private:
  std::vector<pickle_value> dense_;
  std::unordered_map<std::uint64_t, pickle_value> sparse_;
};

}  // namespace streampool::replay_impl
