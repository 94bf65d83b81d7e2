// size_parse.cpp — byte sizes with unit suffixes, comma lists and size labels (size_parse.hpp).
#include "size_parse.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "cli_common.hpp"

namespace streampool::bench {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Multiplier of a unit suffix, 0 if unknown.
std::size_t unit_multiplier(std::string_view unit) {
  const std::string u = lower(unit);
  if (u.empty() || u == "b") return 1;
  if (u == "k" || u == "kib" || u == "kb") return std::size_t{1} << 10;
  if (u == "m" || u == "mib" || u == "mb") return std::size_t{1} << 20;
  if (u == "g" || u == "gib" || u == "gb") return std::size_t{1} << 30;
  if (u == "t" || u == "tib" || u == "tb") return std::size_t{1} << 40;
  return 0;
}

[[noreturn]] void bad_size(std::string_view what, std::string_view text, std::string_view why) {
  throw usage_error(std::string(what) + ": " + quote_input(text) + " is not a size (" + std::string(why) +
                    "); write e.g. 512, 512B, 4KiB, 1MiB, 1.5GiB (suffixes B, K/KiB, M/MiB, G/GiB, T/TiB)");
}

}  // namespace

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t pos = text.find(sep, start);
    parts.emplace_back(trim(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start)));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::size_t parse_size(std::string_view raw, std::string_view what) {
  const std::string_view text = trim(raw);
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) bad_size(what, raw, "it does not start with a number");
  const std::string number(text.substr(0, digits));
  const std::string_view unit = trim(text.substr(digits));
  const std::size_t multiplier = unit_multiplier(unit);
  if (multiplier == 0) bad_size(what, raw, "unknown unit '" + std::string(unit) + "'");
  double value = 0.0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size()) bad_size(what, raw, "malformed number");
  const double bytes = value * static_cast<double>(multiplier);
  if (bytes < 1.0) bad_size(what, raw, "it must be at least 1 byte");
  if (bytes >= 9.0e18) bad_size(what, raw, "too large");
  if (bytes != std::floor(bytes)) bad_size(what, raw, "not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

std::vector<std::size_t> parse_size_list(std::string_view text, std::string_view what) {
  std::vector<std::size_t> sizes;
  for (const std::string& part : split(text, ',')) {
    if (part.empty()) throw usage_error(std::string(what) + ": empty entry in " + quote_input(text));
    sizes.push_back(parse_size(part, what));
  }
  return sizes;
}

std::vector<int> parse_count_list(std::string_view text, std::string_view what, int max) {
  std::vector<int> counts;
  for (const std::string& part : split(text, ',')) {
    int value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || value < 1 || value > max) {
      throw usage_error(std::string(what) + ": " + quote_input(part) + " is not a whole number in 1.." + std::to_string(max) +
                        " (write a comma list such as 1,2,4,8)");
    }
    counts.push_back(value);
  }
  return counts;
}

long long parse_whole(std::string_view text, std::string_view what, long long min, long long max) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw usage_error(std::string(what) + ": " + quote_input(text) + " is not a whole number in " +
                      std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

namespace {
constexpr std::size_t quote_limit = 200;
}  // namespace

std::string quote_input(std::string_view text) {
  if (text.size() <= quote_limit) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, quote_limit)) + "...' (" + std::to_string(text.size()) + " characters)";
}

std::string clip_quoted(std::string_view message) {
  std::string out;
  std::size_t i = 0;
  while (i < message.size()) {
    const std::size_t open = message.find('\'', i);
    if (open == std::string_view::npos) break;
    const std::size_t close = message.find('\'', open + 1);
    if (close == std::string_view::npos) break;
    out += message.substr(i, open - i);
    const std::string_view run = message.substr(open + 1, close - open - 1);
    // A run quote_input cut already ends in "..." after 200 characters: keep it as it is.
    out += run.size() <= quote_limit + 3 ? "'" + std::string(run) + "'" : quote_input(run);
    i = close + 1;
  }
  out += message.substr(i);
  if (out.size() > 4 * quote_limit + 1000) {  // an unquoted flood (no quotes to cut at)
    out = out.substr(0, 4 * quote_limit) + "... (" + std::to_string(message.size()) + " characters)";
  }
  return out;
}

std::string size_label(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[32];
  if (value == std::floor(value)) {
    std::snprintf(buffer, sizeof buffer, "%.0f%s", value, units[unit]);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3g%s", value, units[unit]);
  }
  return buffer;
}

std::string mib_text(double bytes) { return fixed(bytes / 1048576.0, 1); }

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace streampool::bench
