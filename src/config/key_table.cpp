// src/config/key_table.cpp — the one table that describes every config key.
//
// Name, alias, the valid-value text used in every message, and which backend reads the key
// (spec §1.3). key_name(), key_used_by() and the parser's key lookup all read this table.
#include <array>

#include "config/config_detail.hpp"

namespace streampool {
namespace config_detail {
namespace {

using k = config_key;

// Note [Which backend uses a key]
// Spec §1.3 marks most keys "native". streampool's cudaMallocAsync backend also honours
// per_process_memory_fraction (it caps what it takes from the pool) and
// graph_capture_record_stream_reuse (capture support is shared, DESIGN.md), so those two are
// used by both. debug_checks (checking mode, src/check) wraps either backend, so both use it.
// The pinned_* keys configure the pinned host allocator (src/host, make_host_allocator), which
// runs beside either backend: used by both.
constexpr std::array<key_info, config_key_count> key_table{{
    {k::backend, "backend", "", "native or cudaMallocAsync", true, true},
    {k::max_split_size_mb, "max_split_size_mb", "", "an integer >= 20 (MiB)", true, false},
    {k::max_non_split_rounding_mb, "max_non_split_rounding_mb", "", "an integer >= 20 (MiB)", true,
     false},
    {k::roundup_power2_divisions, "roundup_power2_divisions", "",
     "a power of two, or a list [K:D,...,>:D] with K a power of two (MiB) and D 0 or a power "
     "of two",
     true, false},
    {k::roundup_bypass_threshold_mb, "roundup_bypass_threshold_mb", "", "an integer >= 0 (MiB)",
     true, false},
    {k::garbage_collection_threshold, "garbage_collection_threshold", "",
     "a number in (0.0, 1.0), both ends excluded", true, false},
    {k::expandable_segments, "expandable_segments", "", "True or False", true, false},
    {k::release_lock_on_cudamalloc, "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
     "True or False", true, false},
    {k::graph_capture_record_stream_reuse, "graph_capture_record_stream_reuse", "", "True or False",
     true, true},
    {k::per_process_memory_fraction, "per_process_memory_fraction", "", "a number in [0.0, 1.0]",
     true, true},
    {k::large_segment_size_mb, "large_segment_size_mb", "", "an integer > 10 (MiB)", true, false},
    {k::expandable_segments_reserve, "expandable_segments_reserve", "",
     "a fraction of device memory in (0.0, 2.0], or <n>G with an integer n >= 1 (GiB)", true,
     false},
    {k::async_pool, "async_pool", "", "default or dedicated", false, true},
    {k::debug_checks, "debug_checks", "", "True or False", true, true},
    {k::pinned_use_cuda_host_register, "pinned_use_cuda_host_register",
     "pinned_use_hip_host_register", "True or False", true, true},
    {k::pinned_num_register_threads, "pinned_num_register_threads", "", "a power of two <= 128",
     true, true},
    {k::pinned_use_background_threads, "pinned_use_background_threads", "", "True or False", true,
     true},
    {k::pinned_reserve_segment_size_mb, "pinned_reserve_segment_size_mb", "",
     "an integer > 0 (MiB)", true, true},
}};

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < key_table.size(); ++i) {
    if (static_cast<std::size_t>(key_table[i].key) != i) {
      return false;
    }
  }
  return true;
}
static_assert(table_in_enum_order(), "key_table must list the keys in config_key order");

}  // namespace

const key_info& info_of(config_key key) noexcept {
  return key_table[static_cast<std::size_t>(key)];
}

std::optional<config_key> find_key(std::string_view spelling) noexcept {
  for (const key_info& info : key_table) {
    if (spelling == info.name || (!info.alias.empty() && spelling == info.alias)) {
      return info.key;
    }
  }
  return std::nullopt;
}

std::string valid_keys_text() {
  std::string text;
  std::string aliases;
  for (const key_info& info : key_table) {
    text += text.empty() ? "" : ", ";
    text += info.name;
    if (!info.alias.empty()) {
      aliases += aliases.empty() ? "" : ", ";
      aliases += std::string(info.alias) + " = " + std::string(info.name);
    }
  }
  return text + " (aliases: " + aliases + ")";
}

}  // namespace config_detail

std::string_view key_name(config_key key) noexcept {
  if (key >= config_key::count_) {
    return "unknown";
  }
  return config_detail::info_of(key).name;
}

bool key_used_by(config_key key, backend_kind backend) noexcept {
  if (key >= config_key::count_) {
    return false;
  }
  const config_detail::key_info& info = config_detail::info_of(key);
  return backend == backend_kind::native ? info.native : info.async;
}

}  // namespace streampool
