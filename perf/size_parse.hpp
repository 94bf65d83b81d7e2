// size_parse.hpp — the harness's small text parsers and formatters: byte sizes with unit suffixes
// ("512", "4KiB", "1M", "80GiB"), comma lists of sizes and of counts, and short size labels.
// Every parser throws usage_error (cli_common.hpp) with a message naming the bad text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace streampool::bench {

/// "512", "512B", "4KiB", "4K", "1.5MiB", "1M", "2GiB", "2G" (binary units; case-insensitive;
/// "KB"/"MB"/"GB" also mean KiB/MiB/GiB). A fraction must give a whole number of bytes.
/// @throws usage_error naming `what` and the text
[[nodiscard]] std::size_t parse_size(std::string_view text, std::string_view what = "size");
/// "512,1MiB,64MiB" -> sizes; each entry > 0.
[[nodiscard]] std::vector<std::size_t> parse_size_list(std::string_view text, std::string_view what = "--sizes");
/// "1,2,4,8" -> positive integers, each at most `max`.
[[nodiscard]] std::vector<int> parse_count_list(std::string_view text, std::string_view what, int max);

/// One whole number in min..max ("--count 5"): no sign, no fraction, no unit.
/// @throws usage_error naming `what`, the text (quote_input) and the range
[[nodiscard]] long long parse_whole(std::string_view text, std::string_view what, long long min, long long max);

/// `text` in single quotes for an error message, cut to its first 200 characters (with how many
/// there were) so a huge bad input does not flood the terminal.
[[nodiscard]] std::string quote_input(std::string_view text);
/// `message` with every single-quoted run longer than 200 characters cut the same way (for
/// messages built elsewhere, e.g. by Boost.Program_options or the library).
[[nodiscard]] std::string clip_quoted(std::string_view message);

/// Splits at `sep`, trimming blanks; empty entries are kept (callers reject them).
[[nodiscard]] std::vector<std::string> split(std::string_view text, char sep);

/// Short label: "512B", "4KiB", "1MiB", "1.5MiB", "64MiB", "2GiB".
[[nodiscard]] std::string size_label(std::size_t bytes);
/// Bytes as MiB with one decimal ("10744.6").
[[nodiscard]] std::string mib_text(double bytes);
/// printf-style formatting of one double ("%.2f").
[[nodiscard]] std::string fixed(double value, int decimals);

}  // namespace streampool::bench
