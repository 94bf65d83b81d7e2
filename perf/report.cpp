// report.cpp — run metadata and the three renderings (text table, JSON, CSV) of a report.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "backend_registry.hpp"
#include "size_parse.hpp"
#include "streampool/stats.hpp"  // json_quote

#ifndef STREAMPOOL_BENCH_VERSION
#define STREAMPOOL_BENCH_VERSION "unknown"
#endif
#ifndef STREAMPOOL_BENCH_GIT_COMMIT
#define STREAMPOOL_BENCH_GIT_COMMIT "unknown"
#endif

namespace streampool::bench {
namespace {

std::string rate_text(double per_second) {
  if (per_second >= 1e9) return fixed(per_second / 1e9, 2) + "G";
  if (per_second >= 1e6) return fixed(per_second / 1e6, 2) + "M";
  if (per_second >= 1e3) return fixed(per_second / 1e3, 1) + "k";
  return fixed(per_second, 1);
}

/// A cell as shown in the text table.
std::string display(const cell& value, col_kind kind) {
  if (std::holds_alternative<std::monostate>(value)) return "-";
  if (const auto* text = std::get_if<std::string>(&value)) return *text;
  const double number = std::holds_alternative<std::int64_t>(value) ? static_cast<double>(std::get<std::int64_t>(value))
                                                                     : std::get<double>(value);
  if (std::isnan(number)) return "-";
  switch (kind) {
    case col_kind::bytes: return mib_text(number);
    case col_kind::ns: return fixed(number, 1);
    case col_kind::seconds: return fixed(number, 3);
    case col_kind::ratio: return fixed(number, 3);
    case col_kind::rate: return rate_text(number);
    case col_kind::error: return number == 0.0 ? std::string("-") : "±" + fixed(number * 100.0, 0) + "%";
    case col_kind::count:
    case col_kind::text: break;
  }
  return std::holds_alternative<std::int64_t>(value) ? std::to_string(std::get<std::int64_t>(value)) : fixed(number, 2);
}

/// Columns a text takes in a terminal: UTF-8 continuation bytes take none ("±").
std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

std::string wrap_text(const std::string& text, std::size_t width) {
  if (display_width(text) <= width || text.find('\n') != std::string::npos) return text;
  std::string out, line;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && display_width(line) + 1 + display_width(word) > width) {
      out += line + "\n";
      line = "  ";  // a continuation line is indented
    } else if (!line.empty() && line != "  ") {
      line += ' ';
    }
    line += word;
    start = end + 1;
  }
  return out + line;
}

namespace {

std::string heading(const column& col) {
  switch (col.kind) {
    case col_kind::bytes: return col.title + " MiB";
    case col_kind::ns: return col.title + " ns";
    case col_kind::seconds: return col.title + " s";
    case col_kind::rate: return col.title + "/s";
    default: return col.title;
  }
}


std::string json_value(const cell& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return json_quote(*text);
  if (const auto* integer = std::get_if<std::int64_t>(&value)) return std::to_string(*integer);
  if (const auto* real = std::get_if<double>(&value)) {
    if (!std::isfinite(*real)) return "null";
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, "%.9g", *real);
    return buffer;
  }
  return "null";
}

std::string csv_value(const cell& value) {
  if (std::holds_alternative<std::monostate>(value)) return "";
  if (const auto* text = std::get_if<std::string>(&value)) {
    if (text->find_first_of(",\"\n") == std::string::npos) return *text;
    std::string out = "\"";
    for (const char c : *text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  }
  const std::string json = json_value(value);
  return json == "null" ? "" : json;
}

}  // namespace

std::size_t table::index(std::string_view key) const {
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].key == key) return i;
  }
  throw std::logic_error("report: no column " + std::string(key));
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

void add_run_meta(report& out, const driver_choice& choice, const common_options& opts) {
  out.meta.emplace_back("tool", std::string("streampool-bench"));
  out.meta.emplace_back("version", std::string(STREAMPOOL_BENCH_VERSION));
  out.meta.emplace_back("git_commit", std::string(STREAMPOOL_BENCH_GIT_COMMIT));
  out.meta.emplace_back("command", out.command);
  out.meta.emplace_back("date", utc_now_iso8601());
  out.meta.emplace_back("driver", std::string(choice.name()));
  out.meta.emplace_back("driver_reason", choice.why);
  out.meta.emplace_back("device", choice.device_name);
  out.meta.emplace_back("device_memory_bytes", static_cast<std::int64_t>(choice.device_memory));
  out.meta.emplace_back("seed", static_cast<std::int64_t>(opts.seed));
  for (std::string& note : driver_notes(choice)) out.notes.push_back(std::move(note));
  // Note [The environment's config] (backend_registry.cpp): say so when it shapes the run.
  if (const std::string env = env_config_text(); !env.empty() && out.command != "tune") {
    out.meta.emplace_back("streampool_alloc_conf", env);
    out.notes.push_back("STREAMPOOL_ALLOC_CONF='" + env +
                        "' is set: streampool backends listed without =CONFIG run with it (see their config)");
  }
}

std::string render_table(const report& in) {
  std::string out;
  for (const std::string& note : in.notes) out += wrap_text(note, text_width) + "\n";
  for (const table& t : in.tables) {
    out += "\n";
    if (!t.title.empty()) out += t.title + "\n";
    std::vector<std::size_t> shown;
    for (std::size_t c = 0; c < t.columns.size(); ++c) {
      if (t.columns[c].in_table) shown.push_back(c);
    }
    std::vector<std::vector<std::string>> text(t.rows.size() + 1);
    for (const std::size_t c : shown) text[0].push_back(heading(t.columns[c]));
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      for (const std::size_t c : shown) {
        text[r + 1].push_back(c < t.rows[r].size() ? display(t.rows[r][c], t.columns[c].kind) : "-");
      }
    }
    std::vector<std::size_t> width(shown.size(), 0);
    for (const auto& line : text) {
      for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], display_width(line[i]));
    }
    for (std::size_t r = 0; r < text.size(); ++r) {
      std::string line;
      for (std::size_t i = 0; i < shown.size(); ++i) {
        const bool left = t.columns[shown[i]].kind == col_kind::text;
        const std::string pad(width[i] - display_width(text[r][i]), ' ');
        line += (i == 0 ? "" : "  ") + (left ? text[r][i] + pad : pad + text[r][i]);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
      if (r == 0) out += std::string(display_width(line), '-') + "\n";  // as long as the headings
    }
  }
  if (!in.footer.empty()) out += "\n";
  for (const std::string& line : in.footer) out += line + "\n";
  return out;
}

std::string render_json(const report& in) {
  std::string out = "{\n";
  for (const auto& [key, value] : in.meta) out += "  " + json_quote(key) + ": " + json_value(value) + ",\n";
  out += "  \"notes\": [";
  for (std::size_t i = 0; i < in.notes.size(); ++i) out += (i ? ", " : "") + json_quote(in.notes[i]);
  out += "],\n  \"footer\": [";
  for (std::size_t i = 0; i < in.footer.size(); ++i) out += (i ? ", " : "") + json_quote(in.footer[i]);
  out += "]";
  for (const table& t : in.tables) {
    out += ",\n  " + json_quote(t.name) + ": [";
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      out += r ? ",\n    {" : "\n    {";
      for (std::size_t c = 0; c < t.columns.size(); ++c) {
        out += (c ? ", " : "") + json_quote(t.columns[c].key) + ": " +
               (c < t.rows[r].size() ? json_value(t.rows[r][c]) : std::string("null"));
      }
      out += "}";
    }
    out += t.rows.empty() ? "]" : "\n  ]";
  }
  return out + "\n}\n";
}

std::string render_csv(const report& in) {
  std::string out;
  for (const auto& [key, value] : in.meta) out += "# " + key + ": " + csv_value(value) + "\n";
  for (const std::string& note : in.notes) out += "# " + note + "\n";
  bool first = true;
  for (const table& t : in.tables) {
    if (!first) out += "\n# " + t.name + "\n";
    first = false;
    for (std::size_t c = 0; c < t.columns.size(); ++c) out += (c ? "," : "") + t.columns[c].key;
    out += "\n";
    for (const auto& row : t.rows) {
      for (std::size_t c = 0; c < t.columns.size(); ++c) out += (c ? "," : "") + (c < row.size() ? csv_value(row[c]) : "");
      out += "\n";
    }
  }
  for (const std::string& line : in.footer) out += "# " + line + "\n";
  return out;
}

void write_file(const std::string& path, const std::string& text, std::string_view what) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw usage_error(std::string(what) + ": cannot open '" + path + "' for writing");
  file << text;
  if (!file.flush()) throw usage_error(std::string(what) + ": cannot write '" + path + "'");
}

void emit(const report& in, const common_options& opts) {
  std::string text;
  if (opts.format == "json") {
    text = render_json(in);
  } else if (opts.format == "csv") {
    text = render_csv(in);
  } else {
    text = render_table(in);
  }
  if (opts.out.empty()) {
    std::cout << text << std::flush;
  } else {
    write_file(opts.out, text, "--out");
    info(opts, "wrote " + opts.out);
  }
}

}  // namespace streampool::bench
