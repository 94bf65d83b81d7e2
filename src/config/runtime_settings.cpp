// src/config/runtime_settings.cpp — apply_settings(): the config an allocator has after a change
// made at run time (allocator::set_settings, torch.cuda.memory._set_allocator_settings), from the
// config in effect and a config string of the keys to change.
//
// Note [Settings changed at run time]
// PyTorch re-parses its whole allocator config on each _set_allocator_settings(env) call:
// max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold go back to their
// defaults unless `env` gives them, every other key keeps its value (c10's
// AcceleratorAllocatorConfig::parseArgs), and the native allocator reads the new values at its
// next allocation. streampool does the same for the keys its backends can change while they run:
// the size rules (max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions,
// roundup_bypass_threshold_mb), garbage_collection_threshold, release_lock_on_cudamalloc,
// expandable_segments (segments made from now on; existing ones stay as they are, as in PyTorch),
// graph_capture_record_stream_reuse (captures from now on) and per_process_memory_fraction (every
// device). Keys that shape what the allocator was built from (the backend, large_segment_size_mb,
// expandable_segments_reserve, async_pool, debug_checks, cross_stream_reuse and the pinned_* keys
// of the separate host allocator) are refused with a message saying to set them before the allocator is made; `backend`
// naming the backend already in use is accepted, as PyTorch accepts it. A refused string changes
// nothing. Which key is which is the at_run_time column of the key table (run_time::fixed, keeps
// or resets; key_table.cpp), and a key's row copies its value (key_codec::copy).
#include <string>
#include <utility>
#include <vector>

#include "config/config_impl.hpp"
#include "streampool/errors.hpp"

namespace streampool {

bool key_changes_at_run_time(config_key key) noexcept {
  return key < config_key::count_ && config_impl::info_of(key).at_run_time != config_impl::run_time::fixed;
}

namespace {

/// Copies the value of `key` from `from` into `to` (a key that key_changes_at_run_time()).
void copy_value(config_key key, const allocator_config& from, allocator_config& to) noexcept {
  if (key_changes_at_run_time(key)) config_impl::info_of(key).value.copy(from, to);
}

/// The config string of every key `config` sets (what the allocator runs with now).
std::string settings_text(const allocator_config& config) {
  std::string out;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (config.sources[i] == config_source::default_value) continue;
    if (!out.empty()) out += ",";
    out += std::string(key_name(key)) + ":" + config_impl::render_value(config, key);
  }
  return out;
}

/// "max_split_size_mb, ..., per_process_memory_fraction": the keys that change at run time.
std::string runtime_keys_text() {
  std::string out;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (!key_changes_at_run_time(key)) continue;
    if (!out.empty()) out += ", ";
    out += key_name(key);
  }
  return out;
}

void reset_to_default(config_key key, allocator_config& config) {
  copy_value(key, allocator_config{}, config);
  config.sources[static_cast<std::size_t>(key)] = config_source::default_value;
}

}  // namespace

void copy_runtime_values(const allocator_config& from, allocator_config& to) noexcept {
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (key_changes_at_run_time(key)) copy_value(key, from, to);
  }
}

allocator_config apply_settings(const allocator_config& current, std::string_view text) {
  // Parsed as a config of its own first: every value is validated (and every message is the
  // parser's) before anything changes.
  const allocator_config given = parse_config(text, config_source::runtime);
  const bool backend_given = given.source_of(config_key::backend) != config_source::default_value;
  if (backend_given && given.backend != current.backend) {
    throw config_error("streampool: backend:" + std::string(to_string(given.backend)) +
                           " cannot be set at run time: this allocator is the " + std::string(to_string(current.backend)) +
                           " backend. Set the backend in STREAMPOOL_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF) before the "
                           "allocator is made.",
                       "backend", 0);
  }
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (key == config_key::backend || given.sources[i] == config_source::default_value) continue;
    if (!key_changes_at_run_time(key)) {
      throw config_error("streampool: " + std::string(key_name(key)) +
                             " cannot be changed at run time: it takes effect when the allocator is made. Set it "
                             "in STREAMPOOL_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF) before the first allocation. "
                             "Keys that can change at run time: " + runtime_keys_text() + ".",
                         std::string(key_name(key)), 0);
    }
  }
  // The parser's warnings name keys the backend ignores; it assumed native unless told.
  std::vector<std::string> warnings = given.warnings;
  if (!backend_given && current.backend != backend_kind::native) {
    const std::string backend = "backend:" + std::string(to_string(current.backend));
    const bool blank = text.find_first_not_of(" \t\r\n") == std::string_view::npos;
    warnings = parse_config(blank ? backend : std::string(text) + "," + backend, config_source::runtime).warnings;
  }

  allocator_config next = current;
  // Note [Settings changed at run time]: PyTorch's keys that reset on every call (run_time::resets).
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (config_impl::info_of(key).at_run_time == config_impl::run_time::resets) reset_to_default(key, next);
  }
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (key == config_key::backend || given.sources[i] == config_source::default_value) continue;
    copy_value(key, given, next);
    next.sources[i] = config_source::runtime;
  }
  next.text = settings_text(next);
  next.warnings = std::move(warnings);  // what the backend in use ignores of the change
  return next;
}

}  // namespace streampool
