// src/config/key_table.cpp — the one table that describes every config key, one row per key.
//
// Name, alias, the valid-value text used in every message, which backend reads the key
// (docs/pytorch-compatibility.md §1.3), the allocator_config member it sets, for a key that is
// accepted but not implemented what happens instead, the oldest stock PyTorch accepting it, how
// its value is parsed, rendered and copied, and whether it changes at run time. key_name(),
// key_used_by(), key_changes_at_run_time(), the parser's key lookup, apply_value() and warnings,
// render_value() and `config`'s output (config_print.cpp), apply_settings() and the table of
// docs/config.md (checked against this one by tests/unit/config/key_table_test.cpp) all come from
// this table. Note [One row per key] says what a new key needs.
#include <array>

#include "config/key_codecs.hpp"

namespace streampool {
namespace config_impl {
namespace {

using k = config_key;

// Note [One row per key]
// A key is its config_key enum entry (include/streampool/config.hpp), its row here, its
// allocator_config member and the code that reads that member; nothing else lists keys one by
// one. The row says everything the config layer does with the key: names, messages' valid range,
// backends, the PyTorch release, and in `value` (a key_codec) how its text is validated and stored
// (apply), shown (render: `config`, warnings, apply_settings()' text) and copied (copy: run-time
// changes), plus `at_run_time`. apply_value() and render_value() only dispatch through the row. A
// common kind of key takes its codec from a template over its member (key_codecs.hpp):
// bool_key<&c::m>() for True/False, threshold_mib_key<&c::m, min>() for a MiB threshold that
// saturates to `unlimited`, segment_mib_key<&c::m, min>() for a MiB segment size bounded by 16
// TiB, fraction_key<&c::m, ends>() for a number in [0, 1] or (0, 1); a key with a value of its own
// kind names its functions (apply_roundup / render_roundup, ...), defined beside the others in
// key_parsers.cpp and config_print.cpp so their messages and their Notes stay together. So a new
// key of a common kind is the enum entry, one row and its member; a new kind of value adds its
// apply and render functions. Outside the code, docs/config.md's table and the set_values of
// tests/unit/config/key_table_test.cpp (a non-default value for the round trip) need the key too,
// and tests fail until they have it.
// The enum stays in the public header because it is the public identity of a key
// (allocator_config::sources, source_of(), key_name(), key_used_by() take it), and a key's row
// cannot live there without making the parser's internals public. The rows are indexed by the
// enum (info_of() is key_table[key]), so the static_assert below checks at compile time that the
// rows are in enum order. A key added to the enum without a row does not compile either: the
// array is sized by config_key_count, so the missing row is an empty one at the end, whose key
// (the first enumerator) is out of order. That every row has an apply, a render and a copy
// function is a test's (tests/unit/config/key_table_test.cpp): a static_assert comparing function
// addresses with nullptr is not a constant expression for GCC under -fsanitize=address.
// Rules that join two keys (backend:native ignores async_pool, garbage_collection_threshold needs a
// memory fraction) and the backend key's own rules (a second backend key must name the same
// backend; at run time only the backend in use is accepted) stay in config_parse.cpp and
// runtime_settings.cpp, as does "pinned_*" naming the host allocator's keys (config_print.cpp).
//
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
using c = allocator_config;
using r = run_time;

constexpr std::array<key_info, config_key_count> key_table{{
    {k::backend, "backend", "", "native or cudaMallocAsync", true, true, "backend", "", "2.0",
     {&apply_backend, &render_backend, &copy_fields<&c::backend>}, r::fixed},
    {k::max_split_size_mb, "max_split_size_mb", "", "an integer >= 20 (MiB)", true, false, "max_split_size", "", "1.10",
     threshold_mib_key<&c::max_split_size, 20>(), r::resets},
    {k::max_non_split_rounding_mb, "max_non_split_rounding_mb", "", "an integer >= 20 (MiB)", true, false,
     "max_non_split_rounding", "", "2.6", threshold_mib_key<&c::max_non_split_rounding, 20>(), r::keeps},
    {k::roundup_power2_divisions, "roundup_power2_divisions", "",
     "a power of two, or a list [K:D,...,>:D] with K a power of two (MiB) and D 0 or a power "
     "of two (D at most 2^54)",
     true, false, "roundup_power2_divisions", "", "1.12",
     {&apply_roundup, &render_roundup, &copy_fields<&c::roundup_power2_divisions>, /*takes_list=*/true}, r::resets,
     &roundup_value_since},
    {k::roundup_bypass_threshold_mb, "roundup_bypass_threshold_mb", "", "an integer >= 0 (MiB)", true, false,
     "roundup_bypass_threshold", "", "", threshold_mib_key<&c::roundup_bypass_threshold, 0>(), r::keeps},
    {k::garbage_collection_threshold, "garbage_collection_threshold", "",
     "a number in (0.0, 1.0), both ends excluded", true, false, "garbage_collection_threshold", "", "1.12",
     fraction_key<&c::garbage_collection_threshold, ends_excluded>(), r::resets},
    {k::expandable_segments, "expandable_segments", "", "True or False", true, false, "expandable_segments", "", "2.1",
     bool_key<&c::expandable_segments>(), r::keeps},
    {k::release_lock_on_cudamalloc, "release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "True or False", true,
     false, "release_lock_on_cudamalloc", "", "2.2", bool_key<&c::release_lock_on_cudamalloc>(), r::keeps},
    {k::graph_capture_record_stream_reuse, "graph_capture_record_stream_reuse", "", "True or False", true, false,
     "graph_capture_record_stream_reuse", "", "2.9", bool_key<&c::graph_capture_record_stream_reuse>(), r::keeps},
    {k::per_process_memory_fraction, "per_process_memory_fraction", "", "a number in [0.0, 1.0]", true, true,
     "per_process_memory_fraction", "", "main", fraction_key<&c::per_process_memory_fraction, ends_included>(),
     r::keeps},
    {k::large_segment_size_mb, "large_segment_size_mb", "", "an integer > 10 (MiB), at most 16777216 (16 TiB)", true,
     false, "large_segment_size", "", "main", segment_mib_key<&c::large_segment_size, 11>(), r::fixed},
    {k::expandable_segments_reserve, "expandable_segments_reserve", "",
     "a fraction of device memory in (0.0, 2.0], or <n>G with an integer n >= 1 (GiB), at most 16384G", true,
     false, "expandable_segments_reserve", "", "main",
     {&apply_reserve, &render_reserve,
      &copy_fields<&c::expandable_segments_reserve, &c::expandable_segments_reserve_bytes>},
     r::fixed},
    {k::async_pool, "async_pool", "", "default or dedicated", false, true, "async_pool", "", "",
     {&apply_async_pool, &render_async_pool, &copy_fields<&c::async_pool>}, r::fixed},
    {k::debug_checks, "debug_checks", "", "True or False", true, true, "debug_checks", "", "",
     bool_key<&c::debug_checks>(), r::fixed},
    {k::pinned_use_cuda_host_register, "pinned_use_cuda_host_register", "pinned_use_hip_host_register",
     "True or False", true, true, "pinned_use_cuda_host_register", "", "2.2",
     bool_key<&c::pinned_use_cuda_host_register>(), r::fixed},
    {k::pinned_num_register_threads, "pinned_num_register_threads", "", "a power of two <= 128", true, true,
     "pinned_num_register_threads", "", "2.2",
     {&apply_register_threads, &render_integer_of<&c::pinned_num_register_threads>,
      &copy_fields<&c::pinned_num_register_threads>},
     r::fixed},
    {k::pinned_use_background_threads, "pinned_use_background_threads", "", "True or False", true, true,
     "pinned_use_background_threads", "", "2.6", bool_key<&c::pinned_use_background_threads>(), r::fixed},
    {k::pinned_reserve_segment_size_mb, "pinned_reserve_segment_size_mb", "",
     "an integer > 0 (MiB), at most 16777216 (16 TiB)", true, true, "pinned_reserve_segment_size_mb", "", "2.10",
     {&apply_pinned_reserve, &render_integer_of<&c::pinned_reserve_segment_size_mb>,
      &copy_fields<&c::pinned_reserve_segment_size_mb>},
     r::fixed},
    {k::cross_stream_reuse, "cross_stream_reuse", "", "True or False", true, false, "cross_stream_reuse", "", "",
     bool_key<&c::cross_stream_reuse>(), r::fixed},
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
