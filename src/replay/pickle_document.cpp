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
  for (std::size_t i = 0; i + 1 < all.size(); i += 2) {
    if (all[i].kind == pickle_kind::string && strings_[all[i].index] == key) return &all[i + 1];
  }
  return nullptr;
}

std::size_t pickle_document::containers_in_use() const noexcept { return containers_.size() - free_slots_.size(); }

}  // namespace streampool::replay_impl
