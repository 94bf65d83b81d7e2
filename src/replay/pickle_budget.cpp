// pickle_budget.cpp — the pickle reader's bounds (pickle_budget.hpp).
//
// Note [Bounded by what it holds]
// The reader's memory follows what it keeps, and what it keeps follows the events handed over,
// never what the file claims: a pickle of 20 M DUP / MARK / empty-list opcodes (a few MB gzipped)
// once took 1-2.5 GB, and ended in std::bad_alloc. Every growth is checked against pickle_limits,
// each with one message: the stack and the marks (Python's pickler adds items in batches of 1000,
// so a snapshot's stack holds a few thousand values), the items and containers kept (a budget
// that grows with the items handed over to the stream; containers count too, since a popped one
// stays alive for the memo), the bytes of long strings kept, and the memo (one entry per value
// built, as a pickler writes it, plus slack). Skipped strings are read through, never held.
#include "replay/pickle_budget.hpp"

#include <string>

namespace streampool::replay_impl {

void pickle_budget::refuse(const std::string& what) const {
  in_.fail("refused: " + what + "; a memory snapshot never needs that much, so this pickle is damaged or built to "
           "exhaust memory");
}

void pickle_budget::push(std::size_t size) const {
  if (size >= limits_.max_stack) {
    refuse("the stack holds more than " + std::to_string(limits_.max_stack) +
           " values (a memory snapshot's holds a few thousand)");
  }
}

void pickle_budget::mark(std::size_t marks) const {
  if (marks >= limits_.max_stack) refuse("more than " + std::to_string(limits_.max_stack) + " MARKs are open at once");
}

void pickle_budget::keep(std::size_t n) {
  kept_items_ += n;
  const std::size_t budget = limits_.base_items + limits_.items_per_event * handed_over_;
  if (kept_items_ > budget) {
    refuse("it builds containers holding more than " + std::to_string(budget) + " values while it has handed over " +
           std::to_string(handed_over_) + " events (" + std::to_string(limits_.base_items) + " plus " +
           std::to_string(limits_.items_per_event) + " per event are allowed)");
  }
}

void pickle_budget::keep_text(std::uint64_t length) {
  const std::uint64_t budget = limits_.base_text + std::uint64_t{limits_.text_per_event} * handed_over_;
  if (length > budget || kept_text_ + length > budget) {
    refuse("it keeps strings of more than " + std::to_string(budget) + " bytes in all (this one claims " +
           std::to_string(length) + ") while it has handed over " + std::to_string(handed_over_) + " events");
  }
  kept_text_ += length;
}

void pickle_budget::memo(std::size_t entries) const {
  if (entries >= values_built_ + limits_.memo_slack) {
    refuse("the memo would hold more entries (" + std::to_string(entries + 1) + ") than the " +
           std::to_string(values_built_) + " values built so far plus " + std::to_string(limits_.memo_slack) +
           " (a pickler stores each value once)");
  }
}

}  // namespace streampool::replay_impl
