// src/config/key_table.cpp — the one table that describes every config key.
//
// Name, alias, the valid-value text used in every message, which backend reads the key
// (docs/pytorch-compatibility.md §1.3), the allocator_config member it sets and, for a key that
// is accepted but not implemented, what happens instead. key_name(), key_used_by(), the parser's
// key lookup and warnings, `config`'s output (config_print.cpp) and the table of docs/config.md
// (checked against this one by tests/unit/config/key_table_test.cpp) all come from this table.
#include <array>

#include "config/config_impl.hpp"

namespace streampool {
namespace config_impl {
namespace {

using k = config_key;

// Note [Which backend uses a key]
// PyTorch reads most keys in its native allocator only (docs/pytorch-compatibility.md §1.3).
// streampool's cudaMallocAsync backend also honours per_process_memory_fraction (it caps what it
// takes from the pool), so that one is used by both. debug_checks (checking mode, src/check)
// wraps either backend, so both use it. The pinned_* keys configure the pinned host allocator
// (src/host, make_host_allocator), which runs beside either backend: used by both.
//
// Note [Keys accepted but not implemented]
// A PyTorch key that streampool accepts, so that a PyTorch config string keeps working, but does
// not honour, has a `missing` text: a set key gets a warning saying what streampool does instead
// (config_parse.cpp), `config` lists it as "accepted but not implemented", and docs/config.md says
// the same. Every key of the table is honoured today (release_lock_on_cudamalloc and
// graph_capture_record_stream_reuse were the last two); the mechanism stays for keys PyTorch adds.
// A key's `missing` text is what the warning says happens instead.
//
// Note [Which PyTorch accepts a key]
// The last column is the oldest stock PyTorch release whose PYTORCH_CUDA_ALLOC_CONF accepts the
// key, from PyTorch's release history: "" = streampool's own key (stock PyTorch rejects it;
// roundup_bypass_threshold_mb existed only briefly around PyTorch 2.0 and current releases reject
// it), "main" = only in PyTorch builds newer than 2.9 (not in a release we could confirm). The
// list form of roundup_power2_divisions came in 2.0 (pytorch_compatibility_of() knows it). The
// pinned_* keys, release_lock_on_cudamalloc and graph_capture_record_stream_reuse are dated from
// the PyTorch change that added them (may be one release off; docs/config.md says so).
// `tune` reads this column to print the PYTORCH_CUDA_ALLOC_CONF line and its minimum version;
// docs/config.md shows the same column, and a test keeps the two equal.
constexpr std::array<key_info, config_key_count> key_table{{
    {k::backend, "backend", "", "native or cudaMallocAsync", true, true, "backend", "", "2.0"},
    {k::max_split_size_mb, "max_split_size_mb", "", "an integer >= 20 (MiB)", true, false, "max_split_size", "", "1.10"},
    {k::max_non_split_rounding_mb, "max_non_split_rounding_mb", "", "an integer >= 20 (MiB)", true,
     false, "max_non_split_rounding", "", "2.6"},
    {k::roundup_power2_divisions, "roundup_power2_divisions", "",
     "a power of two, or a list [K:D,...,>:D] with K a power of two (MiB) and D 0 or a power "
     "of two (D at most 2^54)",
     true, false, "roundup_power2_divisions", "", "1.12"},
    {k::roundup_bypass_threshold_mb, "roundup_bypass_threshold_mb", "", "an integer >= 0 (MiB)",
     true, false, "roundup_bypass_threshold", "", ""},
    {k::garbage_collection_threshold, "garbage_collection_threshold", "",
     "a number in (0.0, 1.0), both ends excluded", true, false, "garbage_collection_threshold", "", "1.12"},
    {k::expandable_segments, "expandable_segments", "", "True or False", true, false, "expandable_segments", "", "2.1"},
    {k::release_lock_on_cudamalloc, "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
     "True or False", true, false, "release_lock_on_cudamalloc", "", "2.2"},
    {k::graph_capture_record_stream_reuse, "graph_capture_record_stream_reuse", "", "True or False",
     true, false, "graph_capture_record_stream_reuse", "", "2.9"},
    {k::per_process_memory_fraction, "per_process_memory_fraction", "", "a number in [0.0, 1.0]",
     true, true, "per_process_memory_fraction", "", "main"},
    {k::large_segment_size_mb, "large_segment_size_mb", "", "an integer > 10 (MiB), at most 16777216 (16 TiB)", true, false, "large_segment_size", "", "main"},
    {k::expandable_segments_reserve, "expandable_segments_reserve", "",
     "a fraction of device memory in (0.0, 2.0], or <n>G with an integer n >= 1 (GiB), at most 16384G", true,
     false, "expandable_segments_reserve", "", "main"},
    {k::async_pool, "async_pool", "", "default or dedicated", false, true, "async_pool", "", ""},
    {k::debug_checks, "debug_checks", "", "True or False", true, true, "debug_checks", "", ""},
    {k::pinned_use_cuda_host_register, "pinned_use_cuda_host_register",
     "pinned_use_hip_host_register", "True or False", true, true, "pinned_use_cuda_host_register", "", "2.2"},
    {k::pinned_num_register_threads, "pinned_num_register_threads", "", "a power of two <= 128",
     true, true, "pinned_num_register_threads", "", "2.2"},
    {k::pinned_use_background_threads, "pinned_use_background_threads", "", "True or False", true,
     true, "pinned_use_background_threads", "", "2.6"},
    {k::pinned_reserve_segment_size_mb, "pinned_reserve_segment_size_mb", "",
     "an integer > 0 (MiB), at most 16777216 (16 TiB)", true, true, "pinned_reserve_segment_size_mb", "", "2.10"},
    {k::cross_stream_reuse, "cross_stream_reuse", "", "True or False", true, false, "cross_stream_reuse", "", ""},
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

}  // namespace config_impl

std::string_view key_name(config_key key) noexcept {
  if (key >= config_key::count_) {
    return "unknown";
  }
  return config_impl::info_of(key).name;
}

bool key_used_by(config_key key, backend_kind backend) noexcept {
  if (key >= config_key::count_) {
    return false;
  }
  const config_impl::key_info& info = config_impl::info_of(key);
  return info.implemented() && (backend == backend_kind::native ? info.native : info.async);
}

}  // namespace streampool
