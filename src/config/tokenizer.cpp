// src/config/tokenizer.cpp — the lexical level of the config string: tokens and scalar literals.
//
// tokenize() follows docs/pytorch-compatibility.md §1.2 (single-character punctuation tokens, whitespace dropped); the
// literal parsers are deliberately stricter than PyTorch's stoi/stod (no number prefixes).
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>

#include "config/config_impl.hpp"

namespace streampool::config_impl {

// Note [Whitespace inside words]
// docs/pytorch-compatibility.md §1.2: PyTorch drops whitespace while lexing, it does not split on it, so
// "max_split_size_mb : 2 0" reads as max_split_size_mb:20. We keep that (a config that PyTorch
// accepts must mean the same here) and widen "whitespace" to any isspace character, as v2.9 does.
// A word's position is the offset of its first non-space character.
std::vector<token> tokenize(std::string_view text) {
  std::vector<token> tokens;
  token word;
  bool in_word = false;
  const auto flush_word = [&] {
    if (in_word) {
      tokens.push_back(std::move(word));
      word = token{};
      in_word = false;
    }
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      continue;
    }
    token_kind kind = token_kind::word;
    switch (c) {
      case ',': kind = token_kind::comma; break;
      case ':': kind = token_kind::colon; break;
      case '[': kind = token_kind::open_bracket; break;
      case ']': kind = token_kind::close_bracket; break;
      default:
        if (!in_word) {
          word.kind = token_kind::word;
          word.position = i;
          in_word = true;
        }
        word.text.push_back(c);
        continue;
    }
    flush_word();
    tokens.push_back(token{kind, std::string(1, c), i});
  }
  flush_word();
  return tokens;
}

namespace {

bool all_digits(std::string_view text) noexcept {
  if (text.empty()) {
    return false;
  }
  for (const char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

}  // namespace

// Note [Strict integers]
// PyTorch reads integers with stoi/stoull, which accept a numeric prefix ("20abc" -> 20), a sign
// and leading whitespace. A config that relies on that is almost certainly a mistake, so an
// integer here is one or more decimal digits and nothing else; "-5" is reported as negative
// rather than as garbage so the message can say what is wrong.
uint_literal parse_uint(std::string_view text) noexcept {
  if (!text.empty() && text.front() == '-') {
    return {0, all_digits(text.substr(1)) ? literal_error::negative : literal_error::not_a_number};
  }
  if (!all_digits(text)) {
    return {0, literal_error::not_a_number};
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return {0, literal_error::too_large};
  }
  if (ec != std::errc{} || end != text.data() + text.size()) {
    return {0, literal_error::not_a_number};
  }
  return {value, literal_error::none};
}

std::optional<double> parse_double(std::string_view text) noexcept {
  if (text.empty()) {
    return std::nullopt;
  }
  double value = 0.0;
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;  // garbage, trailing junk, overflow, "inf", "nan"
  }
  return value;
}

std::optional<bool> parse_bool(std::string_view text) noexcept {
  if (text == "True") {
    return true;
  }
  if (text == "False") {
    return false;
  }
  return std::nullopt;
}

}  // namespace streampool::config_impl
