// src/config/key_codecs.hpp — the building blocks of a key_table row's `value` column.
//
// Small templates over an allocator_config member that make a key_codec for a common kind of key
// (a True/False key, a size in MiB with its bounds, a fraction, a plain integer member), and the
// named functions of the keys whose value is special (backend, roundup_power2_divisions,
// expandable_segments_reserve, async_pool, the pinned_* integers). The value checks are defined in
// key_parsers.cpp, the renderers in config_print.cpp; each keeps its key's exact messages. Only
// key_table.cpp builds rows from these (Note [One row per key]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config_impl.hpp"

namespace streampool::config_impl {

// ---- value checks (key_parsers.cpp): the value, or config_error with the key's message ---------

/// Exactly True or False.
[[nodiscard]] bool require_bool(const config_value& value, config_key key);
/// An integer of MiB >= min_mib, in bytes. `saturate`: too large becomes `unlimited`
/// (Note [Sizes in MiB]); otherwise at most 16 TiB (Note [Upper bound of segment sizes]).
[[nodiscard]] std::size_t require_mib(const config_value& value, config_key key, std::uint64_t min_mib,
                                      bool saturate);
/// A number in [0, 1] (`include_ends`) or (0, 1).
[[nodiscard]] double require_fraction(const config_value& value, config_key key, bool include_ends);

// ---- renderers (config_print.cpp) --------------------------------------------------------------

[[nodiscard]] std::string render_bool(bool value);
/// Bytes as MiB; "unlimited" for allocator_config::unlimited; a fraction for a size set through
/// the API that is not a whole number of MiB.
[[nodiscard]] std::string render_mib(std::size_t bytes);
/// Shortest text that reads back as the same double ("0.6", "1", "1.125").
[[nodiscard]] std::string render_double(double value);

// ---- templates over a member -------------------------------------------------------------------

template <auto... Fields>
void copy_fields(const allocator_config& from, allocator_config& to) noexcept {
  ((to.*Fields = from.*Fields), ...);
}

template <bool allocator_config::*Field>
void apply_bool(allocator_config& config, config_key key, const config_value& value) {
  config.*Field = require_bool(value, key);
}
template <bool allocator_config::*Field>
std::string render_bool_of(const allocator_config& config) {
  return render_bool(config.*Field);
}

template <std::size_t allocator_config::*Field, std::uint64_t MinMib, bool Saturate>
void apply_mib(allocator_config& config, config_key key, const config_value& value) {
  config.*Field = require_mib(value, key, MinMib, Saturate);
}
template <std::size_t allocator_config::*Field>
std::string render_mib_of(const allocator_config& config) {
  return render_mib(config.*Field);
}

template <double allocator_config::*Field, bool IncludeEnds>
void apply_fraction(allocator_config& config, config_key key, const config_value& value) {
  config.*Field = require_fraction(value, key, IncludeEnds);
}
template <double allocator_config::*Field>
std::string render_double_of(const allocator_config& config) {
  return render_double(config.*Field);
}

template <std::size_t allocator_config::*Field>
std::string render_integer_of(const allocator_config& config) {
  return std::to_string(config.*Field);
}

// ---- codecs of the common kinds of key ---------------------------------------------------------

/// A True/False key.
template <bool allocator_config::*Field>
constexpr key_codec bool_key() {
  return {&apply_bool<Field>, &render_bool_of<Field>, &copy_fields<Field>};
}
/// A threshold in MiB, at least MinMib; a value too large for size_t in bytes saturates to
/// `unlimited` (Note [Sizes in MiB]).
template <std::size_t allocator_config::*Field, std::uint64_t MinMib>
constexpr key_codec threshold_mib_key() {
  return {&apply_mib<Field, MinMib, true>, &render_mib_of<Field>, &copy_fields<Field>};
}
/// A segment size in MiB, at least MinMib and at most 16 TiB (Note [Upper bound of segment sizes]).
template <std::size_t allocator_config::*Field, std::uint64_t MinMib>
constexpr key_codec segment_mib_key() {
  return {&apply_mib<Field, MinMib, false>, &render_mib_of<Field>, &copy_fields<Field>};
}
inline constexpr bool ends_included = true;
inline constexpr bool ends_excluded = false;
/// A number in [0, 1] (ends_included) or (0, 1) (ends_excluded).
template <double allocator_config::*Field, bool IncludeEnds>
constexpr key_codec fraction_key() {
  return {&apply_fraction<Field, IncludeEnds>, &render_double_of<Field>, &copy_fields<Field>};
}

// ---- the special keys (apply_*: key_parsers.cpp, render_*: config_print.cpp) -------------------

void apply_backend(allocator_config& config, config_key key, const config_value& value);
[[nodiscard]] std::string render_backend(const allocator_config& config);
/// A power of two for every interval, or the list form (Note [Roundup list semantics]).
void apply_roundup(allocator_config& config, config_key key, const config_value& value);
/// Note [Rendering the roundup table].
[[nodiscard]] std::string render_roundup(const allocator_config& config);
/// A fraction of device memory or `<n>G` (Note [expandable_segments_reserve]).
void apply_reserve(allocator_config& config, config_key key, const config_value& value);
[[nodiscard]] std::string render_reserve(const allocator_config& config);
void apply_async_pool(allocator_config& config, config_key key, const config_value& value);
[[nodiscard]] std::string render_async_pool(const allocator_config& config);
/// A power of two <= 128, with PyTorch's own messages.
void apply_register_threads(allocator_config& config, config_key key, const config_value& value);
/// An integer of MiB > 0 and at most 16 TiB, stored as MiB, with PyTorch's message for 0.
void apply_pinned_reserve(allocator_config& config, config_key key, const config_value& value);

// ---- the version a value needs (pytorch_versions.cpp) ------------------------------------------

/// "2.0" when the roundup table needs the list form (intervals differ), else "".
[[nodiscard]] std::string_view roundup_value_since(const allocator_config& config);

}  // namespace streampool::config_impl
