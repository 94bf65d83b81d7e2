// src/config/pytorch_versions.cpp — which stock PyTorch accepts a key or a whole config, from the
// key table's pytorch_since and value_since columns (Note [Which PyTorch accepts a key] in
// key_table.cpp); also roundup_value_since(), the value_since of roundup_power2_divisions.
#include <algorithm>
#include <charconv>

#include "config/key_codecs.hpp"

namespace streampool {
namespace {

/// "2.10" -> {2, 10}; "main" sorts after every release.
std::pair<int, int> version_order(std::string_view text) {
  if (text == "main") return {1 << 30, 0};
  int major = 0, minor = 0;
  const std::size_t dot = text.find('.');
  std::from_chars(text.data(), text.data() + (dot == std::string_view::npos ? text.size() : dot), major);
  if (dot != std::string_view::npos) std::from_chars(text.data() + dot + 1, text.data() + text.size(), minor);
  return {major, minor};
}

}  // namespace

namespace config_impl {

std::string_view roundup_value_since(const allocator_config& config) {
  const auto& table = config.roundup_power2_divisions;
  const bool list_form_needed =
      std::any_of(table.begin(), table.end(), [&table](std::size_t d) { return d != table.front(); });
  return list_form_needed ? "2.0" : "";
}

}  // namespace config_impl

std::string_view key_pytorch_since(config_key key) noexcept {
  if (key >= config_key::count_) return "";
  return config_impl::info_of(key).pytorch_since;
}

pytorch_compatibility pytorch_compatibility_of(const allocator_config& config) {
  pytorch_compatibility result;
  const auto raise_to = [&result](std::string_view version) {
    if (result.since.empty() || version_order(version) > version_order(result.since)) result.since = version;
  };
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (config.source_of(key) == config_source::default_value) continue;
    const std::string_view since = key_pytorch_since(key);
    if (since.empty()) {
      result.stock = false;
      result.streampool_only.emplace_back(key_name(key));
      continue;
    }
    raise_to(since);
    const auto value_since = config_impl::info_of(key).value_since;  // e.g. the roundup list form
    if (value_since != nullptr && !value_since(config).empty()) raise_to(value_since(config));
  }
  return result;
}

}  // namespace streampool
