// pickle_arena.cpp — the container slots of the pickle reader (pickle_arena.hpp).
#include "replay/pickle_arena.hpp"

#include <vector>

namespace streampool::replay_impl {

pickle_value pickle_arena::make(pickle_kind kind, const value_role& role) {
  std::size_t index = 0;
  if (!doc_.free_slots_.empty()) {
    index = doc_.free_slots_.back();
    doc_.free_slots_.pop_back();
  } else {
    index = doc_.containers_.size();
    doc_.containers_.emplace_back();
  }
  budget_.keep(1);
  budget_.built();
  pickle_document::container& c = doc_.containers_[index];
  c.kind = kind;
  c.memo_index = pickle_document::no_memo;
  c.handed_over = false;
  c.policy = role.policy;
  if (role.policy == value_policy::stream && kind != pickle_kind::list && kind != pickle_kind::set) {
    c.policy = value_policy::keep;  // only lists and sets hand their items over
  }
  c.tag = role.tag;
  c.filled = false;
  c.live = true;
  c.count = 0;
  pickle_value v;
  v.kind = kind;
  v.index = index;
  v.generation = c.generation;
  return v;
}

void pickle_arena::release(const pickle_value& v, bool only_unowned) {
  std::vector<pickle_value> work{v};
  bool first = true;
  while (!work.empty()) {
    const pickle_value item = work.back();
    work.pop_back();
    if (!item.is_container() || !doc_.alive(item)) continue;
    pickle_document::container& c = doc_.containers_[item.index];
    const bool owned = c.policy == value_policy::undecided || c.policy == value_policy::skip;
    if (!first && only_unowned && !owned) continue;
    first = false;
    for (const pickle_value& child : c.items) {
      if (child.is_container()) work.push_back(child);
    }
    budget_.unkeep(c.items.size() + 1);
    std::vector<pickle_value>().swap(c.items);
    c.live = false;
    ++c.generation;
    doc_.free_slots_.push_back(item.index);
  }
}

void pickle_arena::hand_over(const pickle_value& v, int tag, std::size_t index) {
  release(v, false);
  pickle_document::container& freed = doc_.containers_[v.index];
  freed.handed_over = true;
  freed.repeat_generation = v.generation;
  freed.repeat_tag = tag;
  freed.repeat_item = index;
}

pickle_value pickle_arena::dead_as(const pickle_value& v) const {
  pickle_value out = v;
  const pickle_document::container& c = doc_.containers_[v.index];
  out.kind = c.handed_over && c.repeat_generation == v.generation ? pickle_kind::repeat : pickle_kind::skipped;
  if (out.kind == pickle_kind::repeat) {
    out.index = c.repeat_item;
    out.generation = static_cast<std::uint32_t>(c.repeat_tag);
  }
  return out;
}

}  // namespace streampool::replay_impl
