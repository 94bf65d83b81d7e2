// report.hpp — the harness's output model: a report is run metadata, notes and tables of typed
// cells; render() writes it as an aligned text table, JSON or CSV. Commands fill a report and call
// emit(); none of them prints results directly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cli_common.hpp"

namespace streampool::bench {

/// How a column is shown in the text table (JSON and CSV always carry the raw value).
enum class col_kind : std::uint8_t {
  text,
  count,    ///< integer
  bytes,    ///< shown as MiB with one decimal; raw bytes in JSON/CSV
  ns,       ///< nanoseconds, one decimal
  seconds,  ///< three decimals
  ratio,    ///< three decimals
  rate,     ///< per second: "1.06M"
  error,    ///< relative error bound of an estimate: "±6%"; 0 (not an estimate) shows "-"
};

struct column {
  std::string key;    ///< JSON/CSV name, e.g. "peak_reserved_bytes"
  std::string title;  ///< table heading, e.g. "peak reserved"
  col_kind kind = col_kind::text;
  bool in_table = true;  ///< false: JSON/CSV only (e.g. size_bytes next to the "size" label)
};

/// Empty (shown "-", JSON null), text, integer or real.
using cell = std::variant<std::monostate, std::string, std::int64_t, double>;

struct table {
  std::string name = "results";
  std::string title;  ///< line printed above the text table ("" = none)
  std::vector<column> columns;
  std::vector<std::vector<cell>> rows;

  /// Index of the column named `key`; throws std::logic_error when missing.
  [[nodiscard]] std::size_t index(std::string_view key) const;
};

struct report {
  std::string command;
  std::vector<std::pair<std::string, cell>> meta;  ///< tool, version, device, date, ... in order
  std::vector<std::string> notes;                  ///< shown above the tables
  std::vector<table> tables;
  std::vector<std::string> footer;                 ///< shown below the tables (e.g. a recommendation)
};

/// Adds tool, version, git_commit, command, date (UTC ISO-8601), driver, driver_reason, device,
/// device_memory_bytes and seed, plus the driver notes.
void add_run_meta(report& out, const driver_choice& choice, const common_options& opts);
/// The current UTC time, "2026-01-31T12:34:56Z".
[[nodiscard]] std::string utc_now_iso8601();

/// Width of the text rendering's notes: longer ones are wrapped at spaces (the first screen of
/// `compare` within a terminal's width); tables are as wide as their columns.
inline constexpr std::size_t text_width = 110;
/// `text` wrapped at spaces to lines of at most `width` columns (a longer word stays whole),
/// continuation lines indented by two spaces. Text with a newline is returned as it is.
[[nodiscard]] std::string wrap_text(const std::string& text, std::size_t width);

[[nodiscard]] std::string render_table(const report& in);
[[nodiscard]] std::string render_json(const report& in);
[[nodiscard]] std::string render_csv(const report& in);

/// Renders in --format and writes to --out (or stdout).
/// @throws usage_error when --out cannot be written
void emit(const report& in, const common_options& opts);

/// Writes `text` to `path`. @throws usage_error naming the file when it cannot be written.
void write_file(const std::string& path, const std::string& text, std::string_view what);

}  // namespace streampool::bench
