// src/replay/pickle_arena.hpp — the slots of the pickle reader's containers: built, released
// (with what was built only for them) and reused, with generations so that a stale reference
// reads as released; a container handed over to the stream remembers what it was handed over as
// (Note [Values referenced twice] in pickle_reader.cpp). Every slot counts in the budget.
#pragma once

#include <cstddef>

#include "replay/pickle_budget.hpp"
#include "replay/pickle_reader.hpp"

namespace streampool::replay_impl {

class pickle_arena {
 public:
  pickle_arena(pickle_document& doc, pickle_budget& budget) noexcept : doc_(doc), budget_(budget) {}

  /// A new, empty container of `kind` with `role`'s policy and tag (a stream role only for lists and sets).
  [[nodiscard]] pickle_value make(pickle_kind kind, const value_role& role);
  /// Frees `v`'s slot and, below it, every container built only for it (`undecided`/`skip` ones;
  /// with !only_unowned also kept ones, for a streamed item). Iterative: no deep recursion.
  void release(const pickle_value& v, bool only_unowned);
  /// release() of an item handed over as item `index` of the streamed container tagged `tag`.
  void hand_over(const pickle_value& v, int tag, std::size_t index);
  /// What a released container reads as: a repeat of what it was handed over as, else skipped.
  [[nodiscard]] pickle_value dead_as(const pickle_value& v) const;

 private:
  pickle_document& doc_;
  pickle_budget& budget_;
};

}  // namespace streampool::replay_impl
