// pickle_document.cpp — reading what parse_pickle() built: strings, items, dict lookup and
// whether a container is still alive (pickle_reader.hpp).
#include "replay/pickle_reader.hpp"

namespace streampool::replay_impl {

std::string_view pickle_document::text(const pickle_value& value) const {
  if (value.kind != pickle_kind::string && value.kind != pickle_kind::bytes) return {};
  return strings_[value.index];
}

bool pickle_document::alive(const pickle_value& value) const noexcept {
  if (!value.is_container()) return false;
  const container& c = containers_[value.index];
  return c.live && c.generation == value.generation;
}

std::span<const pickle_value> pickle_document::items(const pickle_value& value) const {
  if (!alive(value)) return {};
  return containers_[value.index].items;
}

const pickle_value* pickle_document::find(const pickle_value& dict, std::string_view key) const {
  if (dict.kind != pickle_kind::dict) return nullptr;
  const std::span<const pickle_value> all = items(dict);
  // From the back: of a key given twice, Python's dict keeps the last value.
  for (std::size_t i = all.size() / 2; i-- > 0;) {
    if (all[2 * i].kind == pickle_kind::string && strings_[all[2 * i].index] == key) return &all[2 * i + 1];
  }
  return nullptr;
}

std::size_t pickle_document::containers_in_use() const noexcept { return containers_.size() - free_slots_.size(); }

}  // namespace streampool::replay_impl
