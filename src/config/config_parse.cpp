// src/config/config_parse.cpp — the entry points parse_config() and config_from_env().
//
// Walks the tokens with the grammar of docs/pytorch-compatibility.md §1.2 (separators enforced), hands each value to
// apply_value(), records where each key came from, then derives the order-independent warnings
// (keys the backend ignores, host-allocator keys, inert garbage collection).
#include <array>
#include <cstdlib>
#include <optional>
#include <utility>

#include "config/config_impl.hpp"
#include "streampool/errors.hpp"

namespace streampool {
namespace config_impl {
namespace {

std::string describe(const token& t) { return "'" + t.text + "'"; }

/// A cursor over the tokens of one config string.
class token_cursor {
 public:
  explicit token_cursor(std::vector<token> tokens) : tokens_(std::move(tokens)) {}
  [[nodiscard]] bool at_end() const noexcept { return next_ == tokens_.size(); }
  [[nodiscard]] const token& peek() const noexcept { return tokens_[next_]; }
  [[nodiscard]] bool peek_is(token_kind kind) const noexcept {
    return !at_end() && peek().kind == kind;
  }
  const token& take() noexcept { return tokens_[next_++]; }

 private:
  std::vector<token> tokens_;
  std::size_t next_ = 0;
};

/// `[K:D, ..., >:D]` after its '[' (already taken).
void read_list(token_cursor& cursor, config_key key, const token& open, config_value& value) {
  const std::string name(info_of(key).name);
  const std::string context = value.key_text + ":[";
  value.is_list = true;
  while (true) {
    if (cursor.at_end()) {
      fail(name, context, open.position, "the list is not closed", "']'");
    }
    if (value.entries.empty() && cursor.peek_is(token_kind::close_bracket)) {
      cursor.take();
      break;  // "[]": apply_value() reports the empty list with the key's valid range
    }
    const token& interval = cursor.take();
    if (interval.kind != token_kind::word) {
      fail(name, context, interval.position, "found " + describe(interval) + " in the list",
           "an entry K:D (K a power of two in MiB, or '>')");
    }
    if (!cursor.peek_is(token_kind::colon)) {
      fail(name, context, interval.position,
           "list entry " + describe(interval) + " has no ':D' part", "an entry K:D");
    }
    cursor.take();
    if (!cursor.peek_is(token_kind::word)) {
      fail(name, context, interval.position,
           "list entry " + describe(interval) + " has no divisions after ':'", "an entry K:D");
    }
    value.entries.push_back(list_entry{interval.text, cursor.take().text, interval.position});
    if (cursor.peek_is(token_kind::close_bracket)) {
      cursor.take();
      break;
    }
    if (!cursor.peek_is(token_kind::comma)) {
      fail(name, context, cursor.at_end() ? open.position : cursor.peek().position,
           cursor.at_end() ? std::string("the list is not closed")
                           : "found " + describe(cursor.peek()) + " after a list entry",
           "',' or ']'");
    }
    cursor.take();
  }
  value.text = "[";
  for (const list_entry& entry : value.entries) {
    value.text += (value.text.size() > 1 ? "," : "") + entry.interval + ":" + entry.divisions;
  }
  value.text += "]";
}

/// The value of one item, after its key (already taken).
config_value read_value(token_cursor& cursor, config_key key, const token& key_token) {
  config_value value;
  value.key_text = key_token.text;
  value.key_position = key_token.position;
  const key_info& info = info_of(key);
  if (!cursor.peek_is(token_kind::colon)) {
    fail(std::string(info.name), key_token.text, key_token.position,
         "missing ':' and value after the key", info.expected);
  }
  cursor.take();
  if (cursor.at_end() || cursor.peek_is(token_kind::comma)) {
    fail(std::string(info.name), key_token.text + ":", key_token.position, "missing value",
         info.expected);
  }
  const token& first = cursor.take();
  value.position = first.position;
  if (first.kind == token_kind::word) {
    value.text = first.text;
  } else if (first.kind == token_kind::open_bracket) {
    read_list(cursor, key, first, value);
  } else {
    fail(std::string(info.name), key_token.text + ":", first.position,
         "found " + describe(first) + " where the value should be", info.expected);
  }
  return value;
}

void add_warnings(allocator_config& config, const std::array<bool, config_key_count>& set) {
  std::string ignored;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (set[i] && key_used_by(key, backend_kind::native) &&
        !key_used_by(key, backend_kind::cuda_malloc_async) &&
        config.backend == backend_kind::cuda_malloc_async) {
      ignored += (ignored.empty() ? "" : ", ") + std::string(key_name(key)) + ":" +
                 render_value(config, key);
    }
  }
  if (!ignored.empty()) {
    config.warnings.push_back("backend:cudaMallocAsync ignores " + ignored +
                              " (they configure the native caching allocator; remove them or use "
                              "backend:native)");
  }
  const auto is_set = [&](config_key key) { return set[static_cast<std::size_t>(key)]; };
  if (config.backend == backend_kind::native && is_set(config_key::async_pool)) {
    config.warnings.push_back(
        "backend:native ignores async_pool:" + render_value(config, config_key::async_pool) +
        " (it selects the memory pool of backend:cudaMallocAsync)");
  }
  // docs/pytorch-compatibility.md §2.11: garbage collection only runs when a memory fraction below 1 caps the allocator.
  if (config.backend == backend_kind::native && is_set(config_key::garbage_collection_threshold) &&
      config.per_process_memory_fraction >= 1.0) {
    config.warnings.push_back(
        "garbage_collection_threshold:" +
        render_value(config, config_key::garbage_collection_threshold) +
        " has no effect while per_process_memory_fraction is 1.0 (garbage collection runs only "
        "under a memory fraction cap); also set per_process_memory_fraction, or call "
        "set_memory_fraction() at run time");
  }
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (set[i] && !info_of(key).implemented()) {  // Note [Keys accepted but not implemented]
      config.warnings.push_back(std::string(key_name(key)) + ":" + render_value(config, key) +
                                " is accepted (PyTorch has this key) but not implemented by streampool: " +
                                std::string(info_of(key).missing));
    }
  }
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    if (set[i] && info_of(key).implemented() && !key_used_by(key, backend_kind::native) &&
        !key_used_by(key, backend_kind::cuda_malloc_async)) {
      config.warnings.push_back(std::string(key_name(key)) + ":" + render_value(config, key) +
                                " configures PyTorch's pinned host allocator; streampool "
                                "validated it but does not use it");
    }
  }
}

}  // namespace
}  // namespace config_impl

// Note [A second backend key]
// PyTorch picks the backend when its library loads, from the first `backend` key of the string;
// when the string is parsed in full later, every `backend` key must name that same backend, or
// it fails ("Allocator backend parsed at runtime != allocator backend parsed at load time").
// So a repeat of the same value is accepted, and a second key naming the other backend is an
// error here too (not "the last one wins", which holds for the other keys).
//
// Note [Trailing comma and empty items]
// PyTorch's loop stops when the tokens run out after a ',', so "a:1," is accepted there; we accept
// one trailing comma too. An empty item anywhere else (",a:1", "a:1,,b:2") is an error: it is
// usually a lost key, and PyTorch would report the ',' as an unknown key anyway.
allocator_config parse_config(std::string_view text, config_source source) {
  using namespace config_impl;
  allocator_config config;
  config.text = std::string(text);
  std::array<bool, config_key_count> set{};
  std::optional<config_value> first_backend;  // Note [A second backend key]
  token_cursor cursor(tokenize(text));
  while (!cursor.at_end()) {
    const token& key_token = cursor.take();
    if (key_token.kind != token_kind::word) {
      fail("", describe(key_token), key_token.position,
           key_token.kind == token_kind::comma
               ? "empty item (leading ',' or ',,')"
               : "found " + describe(key_token) + " where a key should be",
           "key:value");
    }
    const std::optional<config_key> key = find_key(key_token.text);
    if (!key) {
      fail_unknown_key(key_token);
    }
    const config_value value = read_value(cursor, *key, key_token);
    if (*key == config_key::backend) {
      if (first_backend && first_backend->text != value.text) {
        fail("backend", value.key_text + ":" + value.text, value.key_position,
             "a second backend key with another value than the first (backend:" + first_backend->text +
                 " at position " + std::to_string(first_backend->key_position) +
                 "); PyTorch chooses the backend from the first one and refuses a different one",
             "one backend key, or repeats of the same value");
      }
      if (!first_backend) first_backend = value;
    }
    apply_value(config, *key, value);  // duplicate keys: the last one wins (docs/pytorch-compatibility.md §1.2)
    set[static_cast<std::size_t>(*key)] = true;
    config.sources[static_cast<std::size_t>(*key)] = source;
    if (!cursor.at_end()) {
      const token& separator = cursor.take();
      if (separator.kind != token_kind::comma) {
        fail(std::string(key_name(*key)), value.key_text + ":" + value.text, separator.position,
             "found " + describe(separator) + " after the value", "',' or the end of the string");
      }
    }
  }
  add_warnings(config, set);
  return config;
}

// Note [Environment precedence]
// docs/config.md "Where the string comes from": STREAMPOOL_ALLOC_CONF, then PYTORCH_CUDA_ALLOC_CONF, then PYTORCH_ALLOC_CONF.
// The first variable that is *set* wins even when empty (docs/pytorch-compatibility.md §1.1: "first one that is set"), so
// STREAMPOOL_ALLOC_CONF= switches a PyTorch setting off for streampool. A shadowed variable with
// different content gets a warning, since the two halves of PyTorch can disagree about it too.
allocator_config config_from_env() {
  struct variable {
    const char* name;
    config_source source;
  };
  constexpr std::array<variable, 3> variables{{
      {"STREAMPOOL_ALLOC_CONF", config_source::env_streampool},
      {"PYTORCH_CUDA_ALLOC_CONF", config_source::env_pytorch_cuda},
      {"PYTORCH_ALLOC_CONF", config_source::env_pytorch},
  }};
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const char* text = std::getenv(variables[i].name);
    if (text == nullptr) {
      continue;
    }
    allocator_config config;
    try {
      config = parse_config(text, variables[i].source);
    } catch (const config_error& e) {
      throw config_error(std::string(variables[i].name) + ": " + e.what(), e.key(), e.position());
    }
    config.source_variable = variables[i].name;
    for (std::size_t j = i + 1; j < variables.size(); ++j) {
      const char* shadowed = std::getenv(variables[j].name);
      if (shadowed != nullptr && std::string_view(shadowed) != config.text) {
        config.warnings.push_back(std::string(variables[j].name) + " is set but ignored because " +
                                  variables[i].name + " is set and takes precedence");
      }
    }
    return config;
  }
  return allocator_config{};
}

}  // namespace streampool
