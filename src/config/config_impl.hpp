// src/config/config_impl.hpp — internal interface shared by the files of the config parser.
//
// Lexing and strict literals (tokenizer.cpp), the key table (key_table.cpp: one row per key,
// with the functions that parse, render and copy its value; Note [One row per key]), error
// messages and suggestions (diagnostics.cpp), the value checks and special parsers the rows use
// (key_parsers.cpp, declared in key_codecs.hpp) and value rendering (config_print.cpp).
// apply_value() and render_value() dispatch through the row. Not installed: other layers use
// only include/streampool/config.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streampool/config.hpp"

namespace streampool::config_impl {

// ---- tokens (tokenizer.cpp) -------------------------------------------------------------------

enum class token_kind : std::uint8_t { word, comma, colon, open_bracket, close_bracket };

/// One token. `position` is the 0-based offset of its first character in the config string.
struct token {
  token_kind kind = token_kind::word;
  std::string text;
  std::size_t position = 0;
};

/// Splits a config string into tokens (docs/pytorch-compatibility.md §1.2): `,` `:` `[` `]` are single-character tokens,
/// any isspace character is dropped (also inside a word), everything else accumulates into words.
[[nodiscard]] std::vector<token> tokenize(std::string_view text);

// ---- strict literals (tokenizer.cpp) ----------------------------------------------------------

enum class literal_error : std::uint8_t { none, not_a_number, negative, too_large };

struct uint_literal {
  std::uint64_t value = 0;
  literal_error error = literal_error::none;
};

/// Decimal digits only: no sign, no trailing junk ("20abc" is an error, unlike stoi).
[[nodiscard]] uint_literal parse_uint(std::string_view text) noexcept;
/// A finite decimal number as std::from_chars reads it; no sign prefix '+', no trailing junk.
[[nodiscard]] std::optional<double> parse_double(std::string_view text) noexcept;
/// Exactly `True` or `False` (docs/pytorch-compatibility.md §1.2).
[[nodiscard]] std::optional<bool> parse_bool(std::string_view text) noexcept;

// ---- values as the grammar found them (built by config_parse.cpp) ------------------------------

/// One `K:D` entry of a bracketed list.
struct list_entry {
  std::string interval;   ///< K: digits or ">"
  std::string divisions;  ///< D
  std::size_t position = 0;
};

/// The key and value of one item, whitespace removed.
struct config_value {
  std::string key_text;  ///< the key as written (may be an alias)
  std::size_t key_position = 0;
  std::string text;  ///< the value; a list is rendered back as "[K:D,...]"
  std::size_t position = 0;
  bool is_list = false;
  std::vector<list_entry> entries;
};

// ---- the key table (key_table.cpp) ------------------------------------------------------------

/// How a key's value is read and written (Note [One row per key] in key_table.cpp). Built for each
/// row by the helpers of key_codecs.hpp.
struct key_codec {
  /// Validates the value text and stores it in the key's allocator_config member(s); `key` names
  /// the key in messages. @throws config_error
  void (*apply)(allocator_config& config, config_key key, const config_value& value) = nullptr;
  /// The value in config-string syntax, as `config` and the warnings show it.
  std::string (*render)(const allocator_config& config) = nullptr;
  /// Copies the key's member(s) from `from` into `to` (apply_settings(), copy_runtime_values()).
  void (*copy)(const allocator_config& from, allocator_config& to) noexcept = nullptr;
  /// Whether the value may be a bracketed list `[K:D,...]`.
  bool takes_list = false;
};

/// What allocator::set_settings does with a key (Note [Settings changed at run time] in
/// runtime_settings.cpp).
enum class run_time : std::uint8_t {
  fixed,   ///< cannot change once the allocator is made: a change naming it is refused
  keeps,   ///< can change; a change that does not name it keeps its value
  resets,  ///< can change; a change that does not name it returns it to its default (PyTorch's rule)
};

struct key_info {
  config_key key;
  std::string_view name;
  std::string_view alias;     ///< "" when none
  std::string_view expected;  ///< the valid values, for messages ("an integer >= 20 (MiB)")
  bool native;                ///< used by backend:native (when implemented)
  bool async;                 ///< used by backend:cudaMallocAsync (when implemented)
  /// The allocator_config member the key sets. For an honoured key, the backends' code reads it:
  /// tests/unit/config/key_table_test.cpp checks that their sources mention `.<field>`.
  std::string_view field;
  /// "" when streampool honours the key; otherwise what streampool does instead (the key is
  /// accepted, as PyTorch has it, with a warning saying it is not implemented). See
  /// Note [Keys accepted but not implemented] in key_table.cpp.
  std::string_view missing;
  [[nodiscard]] constexpr bool implemented() const noexcept { return missing.empty(); }
  /// Oldest stock PyTorch accepting the key; "" = streampool's own (Note [Which PyTorch accepts a key]).
  std::string_view pytorch_since;
  /// How the value is parsed, rendered and copied.
  key_codec value;
  /// Whether and how the key changes at run time.
  run_time at_run_time;
  /// The oldest stock PyTorch accepting the value `config` holds, where the value's form needs a
  /// newer one than pytorch_since (the list form of roundup_power2_divisions); "" = pytorch_since.
  /// nullptr for a key whose every value is accepted from pytorch_since.
  std::string_view (*value_since)(const allocator_config& config) = nullptr;
};

[[nodiscard]] const key_info& info_of(config_key key) noexcept;
/// The key spelled `spelling` (canonical name or alias); nullopt when unknown.
[[nodiscard]] std::optional<config_key> find_key(std::string_view spelling) noexcept;
/// "backend, max_split_size_mb, ..." followed by the aliases.
[[nodiscard]] std::string valid_keys_text();

// ---- messages (diagnostics.cpp) ---------------------------------------------------------------

/// Throws config_error with message
/// "streampool config: <context> at position <position>: <problem>; expected <expected>"
/// (the "; expected" part is left out when `expected` is empty).
[[noreturn]] void fail(std::string key, std::string_view context, std::size_t position,
                       std::string_view problem, std::string_view expected);
/// fail() for a bad value: context "<key as written>:<value>", position of the key, the key's
/// valid range as `expected`.
[[noreturn]] void fail_value(const config_value& value, config_key key, std::string_view problem);
/// fail() for a bad list entry: context "<key> entry K:D", position of the entry.
[[noreturn]] void fail_entry(const config_value& value, config_key key, const list_entry& entry,
                             std::string_view problem);
/// A word that is not a key: misconception message, '=' hint, or the did-you-mean message.
[[noreturn]] void fail_unknown_key(const token& word);

/// Case-insensitive Levenshtein distance.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `word` when it is close enough to be a plausible typo.
[[nodiscard]] std::optional<std::string_view> closest_match(
    std::string_view word, std::span<const std::string_view> candidates);
/// " (did you mean 'X'?)" or "".
[[nodiscard]] std::string did_you_mean(std::string_view word,
                                       std::span<const std::string_view> candidates);

// ---- applying and rendering a value: through the key's row ------------------------------------

/// Validates `value` for `key` and stores it in `config` (the row's apply; a list only for a key
/// that takes one). key_parsers.cpp. @throws config_error
void apply_value(allocator_config& config, config_key key, const config_value& value);

/// The value of `key` in config-string syntax (the row's render; "unlimited" for an unset
/// max_split_size_mb). config_print.cpp.
[[nodiscard]] std::string render_value(const allocator_config& config, config_key key);

}  // namespace streampool::config_impl
