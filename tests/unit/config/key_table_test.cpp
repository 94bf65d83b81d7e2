// key_table_test.cpp — the key table (src/config/key_table.cpp) is the one source of what is
// claimed about each key, so these tests fail when a claim and the code part ways:
// - docs/config.md's "Keys" table lists exactly the table's keys, with its aliases, backend and
//   status (honoured / not implemented / warned, not used);
// - an honoured key names the allocator_config member it sets, and the sources of every backend
//   that uses it read that member (`.member` or `->member`); a key that is not implemented is read by none;
// - a key that is not implemented gets a warning saying so, and is listed so by `config`;
// - every row parses, renders and copies its key's value (Note [One row per key]): it has the three
//   functions, setting a key changes no other key's value, and a key's default rendering applied
//   back over a set value renders the default again (a round trip), as does a set value's rendering.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_impl.hpp"
#include "streampool/config.hpp"
#include "streampool/errors.hpp"

namespace streampool::config_impl {
namespace {

namespace fs = std::filesystem;
const fs::path source_dir = STREAMPOOL_SOURCE_DIR;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {  // skip the leading '|'
    if (line[i] == '|') {
      const auto first = cell.find_first_not_of(' ');
      const auto last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

struct doc_row {
  std::string alias;
  std::string backend;
  std::string status;
};

/// The rows of the table under "## Keys" in docs/config.md, by key; columns found by heading.
std::map<std::string, doc_row> documented_keys() {
  std::istringstream in(read_file(source_dir / "docs" / "config.md"));
  std::string line;
  while (std::getline(in, line) && line != "## Keys") {
  }
  std::vector<std::string> headings;
  std::map<std::string, doc_row> rows;
  while (std::getline(in, line) && line.rfind("## ", 0) != 0) {
    if (line.rfind("|", 0) != 0) {
      if (!headings.empty() && !rows.empty()) break;  // the table ended
      continue;
    }
    const std::vector<std::string> cells = split_cells(line);
    if (headings.empty()) {
      headings = cells;
      continue;
    }
    if (cells.empty() || cells[0].rfind("---", 0) == 0) continue;
    std::map<std::string, std::string> by_heading;
    for (std::size_t i = 0; i < cells.size() && i < headings.size(); ++i) by_heading[headings[i]] = cells[i];
    const std::string& key_cell = by_heading["Key"];
    const std::regex key_re("^`([a-z0-9_]+)`(?: \\(alias `([a-z0-9_]+)`\\))?$");
    std::smatch m;
    EXPECT_TRUE(std::regex_match(key_cell, m, key_re)) << "docs/config.md: key cell '" << key_cell << "'";
    rows[m[1]] = {m[2], by_heading["Backend"], by_heading["Status"]};
  }
  return rows;
}

/// The pinned_* keys configure the pinned host allocator (src/host), which runs beside either
/// device backend: the key table marks them used by both, docs/config.md names the host allocator.
bool is_host_key(const key_info& info) { return info.name.rfind("pinned_", 0) == 0; }

std::string expected_backend(const key_info& info) {
  if (is_host_key(info)) return "pinned host allocator";
  if (info.native && info.async) return "both";
  if (info.native) return "native";
  if (info.async) return "cudaMallocAsync";
  return "none";
}

std::string expected_status(const key_info& info) {
  if (!info.implemented()) return "not implemented";
  return info.native || info.async ? "honoured" : "warned, not used";
}

TEST(key_table, DocsTableMatchesTheKeyTable) {
  const std::map<std::string, doc_row> docs = documented_keys();
  ASSERT_FALSE(docs.empty()) << "no key table found under '## Keys' in docs/config.md";
  EXPECT_EQ(docs.size(), config_key_count) << "docs/config.md lists another number of keys than the key table";
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const key_info& info = info_of(static_cast<config_key>(i));
    const auto row = docs.find(std::string(info.name));
    if (row == docs.end()) {
      ADD_FAILURE() << info.name << " is missing from docs/config.md";
      continue;
    }
    EXPECT_EQ(row->second.alias, info.alias) << info.name;
    EXPECT_EQ(row->second.backend.rfind(expected_backend(info), 0), 0u)
        << info.name << ": docs say backend '" << row->second.backend << "', the key table '" << expected_backend(info)
        << "'";
    EXPECT_EQ(row->second.status, expected_status(info)) << info.name;
  }
}

/// The sources under `dir` (relative to the source tree).
std::string sources_under(const char* dir) {
  std::string text;
  for (const auto& entry : fs::recursive_directory_iterator(source_dir / dir)) {
    if (entry.is_regular_file()) text += read_file(entry.path());
  }
  return text;
}

/// The sources of `backend`: its directory, the factory that builds it, and checking mode (which
/// wraps either backend).
std::string backend_sources(bool native) {
  std::string text = read_file(source_dir / "src" / "factory" / "allocator_factory.cpp");
  for (const char* dir : {native ? "src/native" : "src/async", "src/check"}) {
    for (const auto& entry : fs::recursive_directory_iterator(source_dir / dir)) {
      if (entry.is_regular_file()) text += read_file(entry.path());
    }
  }
  return text;
}

bool reads_member(const std::string& sources, std::string_view member) {
  return std::regex_search(sources, std::regex("(\\.|->)" + std::string(member) + "\\b"));
}

TEST(key_table, EveryHonouredKeyIsReadByTheBackendsThatClaimIt) {
  const std::string native = backend_sources(true);
  const std::string async = backend_sources(false);
  const std::string host = sources_under("src/host");
  ASSERT_GT(native.size(), 10000u) << "the native sources were not found under " << source_dir;
  ASSERT_GT(host.size(), 1000u) << "the host allocator's sources were not found under " << source_dir;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const key_info& info = info_of(static_cast<config_key>(i));
    ASSERT_FALSE(info.field.empty()) << info.name << " names no allocator_config member";
    if (info.implemented() && is_host_key(info)) {
      EXPECT_TRUE(reads_member(host, info.field)) << info.name << ": no host allocator code reads ." << info.field;
    } else if (info.implemented()) {
      if (info.native) {
        EXPECT_TRUE(reads_member(native, info.field)) << info.name << ": no native code reads ." << info.field;
      }
      if (info.async) {
        EXPECT_TRUE(reads_member(async, info.field)) << info.name << ": no async code reads ." << info.field;
      }
    } else {
      EXPECT_FALSE(reads_member(native, info.field) || reads_member(async, info.field))
          << info.name << " is marked not implemented, but a backend reads ." << info.field
          << ": implement it fully and mark it honoured";
    }
  }
}

TEST(key_table, TheMemberCheckCanFail) {
  const std::string native = backend_sources(true);
  EXPECT_TRUE(reads_member(native, "max_split_size"));
  EXPECT_FALSE(reads_member(native, "no_such_member_anywhere"));
  EXPECT_FALSE(reads_member(native, "max_split_siz")) << "whole names only";
}

TEST(key_table, NotImplementedKeysWarnAndAreListedSo) {
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const key_info& info = info_of(static_cast<config_key>(i));
    if (info.implemented()) continue;
    const allocator_config config = parse_config(std::string(info.name) + ":True");
    bool warned = false;
    for (const std::string& warning : config.warnings) {
      warned = warned || (warning.find(std::string(info.name)) == 0 &&
                          warning.find("not implemented by streampool: " + std::string(info.missing)) != std::string::npos);
    }
    EXPECT_TRUE(warned) << info.name << " set without a 'not implemented' warning";
    EXPECT_FALSE(key_used_by(info.key, backend_kind::native)) << info.name;
    EXPECT_FALSE(key_used_by(info.key, backend_kind::cuda_malloc_async)) << info.name;
    EXPECT_NE(to_string(config).find("accepted but not implemented: "), std::string::npos);
  }
  EXPECT_TRUE(info_of(config_key::release_lock_on_cudamalloc).implemented());
  EXPECT_TRUE(info_of(config_key::graph_capture_record_stream_reuse).implemented());
}

TEST(key_table, ASecondBackendKeyMustNameTheSameBackend) {
  EXPECT_EQ(parse_config("backend:native,backend:native").backend, backend_kind::native);
  EXPECT_EQ(parse_config("backend:cudaMallocAsync,max_split_size_mb:20,backend:cudaMallocAsync").backend,
            backend_kind::cuda_malloc_async);
  try {
    (void)parse_config("backend:native,max_split_size_mb:20,backend:cudaMallocAsync");
    FAIL() << "a conflicting second backend key was accepted";
  } catch (const config_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.key(), "backend");
    EXPECT_EQ(e.position(), 36u) << message;
    EXPECT_NE(message.find("backend:native at position 0"), std::string::npos) << message;
    EXPECT_NE(message.find("refuses a different one"), std::string::npos) << message;
  }
  EXPECT_THROW((void)parse_config("backend:cudaMallocAsync,backend:native"), config_error);
}

TEST(key_table, EveryRowHasItsParserRendererAndCopy) {
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const key_info& info = info_of(static_cast<config_key>(i));
    EXPECT_EQ(static_cast<std::size_t>(info.key), i) << info.name;
    EXPECT_NE(info.value.apply, nullptr) << info.name << " has no apply function";
    EXPECT_NE(info.value.render, nullptr) << info.name << " has no render function";
    EXPECT_NE(info.value.copy, nullptr) << info.name << " has no copy function";
    EXPECT_EQ(key_changes_at_run_time(info.key), info.at_run_time != run_time::fixed) << info.name;
  }
}

/// The value text `text` as the parser hands it to apply_value(): a word, or a list "[K:D,...]"
/// (the form render_value() writes) split into its entries.
config_value value_of(config_key key, const std::string& text) {
  config_value value;
  value.key_text = std::string(info_of(key).name);
  value.text = text;
  if (!text.empty() && text.front() == '[' && text.back() == ']') {
    value.is_list = true;
    std::stringstream entries(text.substr(1, text.size() - 2));
    std::string entry;
    while (std::getline(entries, entry, ',')) {
      const std::size_t colon = entry.find(':');
      value.entries.push_back({entry.substr(0, colon), colon == std::string::npos ? "" : entry.substr(colon + 1), 0});
    }
  }
  return value;
}

struct set_value {
  config_key key;
  const char* text;
};
/// A value of each key other than its default, in config_key order: what the round trip applies the
/// default over, so that an apply that stores nothing (or into another member) is caught. A new key
/// needs one here (the test says so).
constexpr std::array<set_value, config_key_count> set_values{{
    {config_key::backend, "cudaMallocAsync"},
    {config_key::max_split_size_mb, "64"},
    {config_key::max_non_split_rounding_mb, "32"},
    {config_key::roundup_power2_divisions, "[256:1,>:8]"},
    {config_key::roundup_bypass_threshold_mb, "512"},
    {config_key::garbage_collection_threshold, "0.6"},
    {config_key::expandable_segments, "True"},
    {config_key::release_lock_on_cudamalloc, "True"},
    {config_key::graph_capture_record_stream_reuse, "True"},
    {config_key::per_process_memory_fraction, "0.3"},
    {config_key::large_segment_size_mb, "32"},
    {config_key::expandable_segments_reserve, "6G"},
    {config_key::async_pool, "dedicated"},
    {config_key::debug_checks, "True"},
    {config_key::pinned_use_cuda_host_register, "True"},
    {config_key::pinned_num_register_threads, "16"},
    {config_key::pinned_use_background_threads, "True"},
    {config_key::pinned_reserve_segment_size_mb, "128"},
    {config_key::cross_stream_reuse, "True"},
}};

/// Keys whose default renders as text the key does not accept, and why. For these the round trip
/// of the default is replaced by a check that the text is indeed refused (so the list stays exact:
/// make one parse and the test says to remove it here); their set value still round-trips.
bool default_is_not_a_value(config_key key) {
  switch (key) {
    case config_key::max_split_size_mb:            // "unlimited": no limit is asked for by leaving the key out;
    case config_key::roundup_bypass_threshold_mb:  // PyTorch accepts no such word, so neither do we
    case config_key::garbage_collection_threshold:    // "0" = off; the key takes only (0, 1)
    case config_key::pinned_reserve_segment_size_mb:  // "0" = no reserve segment; the key takes only > 0
      return true;
    default: return false;
  }
}

TEST(key_table, RenderedValuesApplyBackToTheSameRendering) {
  const allocator_config defaults;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    const key_info& info = info_of(key);
    SCOPED_TRACE(std::string(info.name));
    const std::string default_text = render_value(defaults, key);

    ASSERT_TRUE(set_values[i].text != nullptr && set_values[i].key == key)
        << "set_values[" << i << "] is not " << info.name << ": give each key a set value, in config_key order";
    allocator_config set;
    apply_value(set, key, value_of(key, set_values[i].text));
    const std::string set_text = render_value(set, key);
    ASSERT_NE(set_text, default_text) << "set_values[" << i << "] must change how " << info.name << " renders";
    for (std::size_t j = 0; j < config_key_count; ++j) {  // a row stores into its own member only
      const auto other = static_cast<config_key>(j);
      EXPECT_TRUE(j == i || render_value(set, other) == render_value(defaults, other))
          << "setting " << info.name << " changed " << key_name(other);
    }
    allocator_config again;
    apply_value(again, key, value_of(key, set_text));
    EXPECT_EQ(render_value(again, key), set_text) << "the rendering of a set value does not apply back";
    allocator_config copied;
    info.value.copy(set, copied);
    EXPECT_EQ(render_value(copied, key), set_text) << "the row's copy does not copy the value";

    allocator_config back = set;  // the default's text applied over the set value
    if (default_is_not_a_value(key)) {
      EXPECT_THROW(apply_value(back, key, value_of(key, default_text)), config_error)
          << "the default renders as '" << default_text << "', which now applies: remove " << info.name
          << " from default_is_not_a_value()";
      continue;
    }
    apply_value(back, key, value_of(key, default_text));
    EXPECT_EQ(render_value(back, key), default_text);
    // The same through the whole parser (tokens, list grammar, the row).
    EXPECT_EQ(render_value(parse_config(std::string(info.name) + ":" + default_text), key), default_text);
  }
}

}  // namespace
}  // namespace streampool::config_impl
