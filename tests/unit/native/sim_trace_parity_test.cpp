// sim_trace_parity_test.cpp — the sim predicts PyTorch exactly: every real training trace in
// tests/data/traces (and tests/data/encoder_varlen.trace.csv.gz) is replayed through the native backend on the sim driver under every config
// of the tune grid, and peak reserved must equal what PyTorch's own allocator reached on an H200
// (tests/data/traces/expected.csv; README.md there says how each figure was measured), and so
// must the number of device mallocs wherever the H200 figure is known.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "streampool/replay.hpp"
#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

const std::string data_dir = std::string(STREAMPOOL_TEST_DATA_DIR) + "/traces/";

struct expected_row {
  std::string trace;
  std::string config;
  std::size_t peak_reserved_mib = 0;
  std::string device_mallocs;  ///< "" when not known
  std::string source;
  std::string rerun_mib;  ///< "" when the training was not rerun per config
  std::size_t line = 0;
};

/// Splits one CSV line; fields may be double-quoted (configs hold commas).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (const char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::vector<expected_row> read_expected() {
  std::ifstream in(data_dir + "expected.csv");
  EXPECT_TRUE(in.good()) << data_dir << "expected.csv is missing";
  std::vector<expected_row> rows;
  std::string line;
  bool header = true;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = csv_fields(line);
    if (header) {
      EXPECT_EQ(line, "trace,config,expected_mib,expected_device_mallocs,source,rerun_mib");
      header = false;
      continue;
    }
    if (f.size() != 6 || f[2].empty() || (f[4] != "replay" && f[4] != "rerun")) {
      ADD_FAILURE() << "expected.csv line " << number << " is malformed: " << line;
      continue;
    }
    rows.push_back({f[0], f[1], std::stoul(f[2]), f[3], f[4], f[5], number});
  }
  return rows;
}

/// A trace: its name in expected.csv and its file under tests/data.
struct trace_file {
  const char* name;
  const char* path;
};

const trace_file traces[] = {
    {"resnet50_varres", "traces/resnet50_varres.trace.csv.gz"},
    {"gpt2_varlen", "traces/gpt2_varlen.trace.csv.gz"},
    {"twostream_cnn", "traces/twostream_cnn.trace.csv.gz"},
    {"threestream_enc", "traces/threestream_enc.trace.csv.gz"},
    {"encoder_varlen", "encoder_varlen.trace.csv.gz"},
};

class sim_trace_parity : public ::testing::TestWithParam<trace_file> {};

TEST_P(sim_trace_parity, PeakReservedEqualsPyTorchOnTheH200ForEveryConfig) {
  const std::string trace = GetParam().name;
  const std::vector<trace_event> events = read_trace(std::string(STREAMPOOL_TEST_DATA_DIR) + "/" + GetParam().path);
  std::map<std::string, std::size_t> seen;  // config -> expected.csv line
  for (const expected_row& row : read_expected()) {
    if (row.trace != trace) continue;
    EXPECT_TRUE(seen.emplace(row.config, row.line).second) << "config '" << row.config << "' listed twice";
    sim_options options;
    options.capacity = 143771 * MiB;  // the H200's memory.total
    native_env env(row.config, options);
    replay_options replay;
    replay.sim = env.sim.get();
    const replay_result result = replay_trace(*env.alloc, events, replay);
    const std::string what = trace + " with '" + row.config + "' (expected.csv line " + std::to_string(row.line) + ")";
    EXPECT_EQ(result.peak_reserved, row.peak_reserved_mib * MiB)
        << what << ": the sim reserved " << result.peak_reserved / MiB << " MiB at peak, PyTorch on the H200 "
        << row.peak_reserved_mib << " MiB (" << row.source << ")";
    if (!row.device_mallocs.empty()) {
      EXPECT_EQ(result.device_mallocs, std::stoll(row.device_mallocs)) << what << ": device mallocs";
    }
  }
  // The whole tune grid, each config once: default, max_split_size_mb 128/256/512, roundup 4/8/list,
  // max_split + roundup, GC threshold + max_split, expandable segments.
  EXPECT_EQ(seen.size(), 10u) << trace << ": expected.csv must cover the whole grid";
}

INSTANTIATE_TEST_SUITE_P(h200, sim_trace_parity,
                         ::testing::ValuesIn(traces),
                         [](const ::testing::TestParamInfo<trace_file>& test) { return std::string(test.param.name); });

/// README.md's table shows expected.csv: "7210 (7246)" = replay figure (rerun figure when it
/// differs), "1324 r" = a rerun figure used as the expectation.
TEST(sim_trace_parity_data, ReadmeTableMatchesExpectedCsv) {
  std::map<std::pair<std::string, std::string>, std::string> cells;
  for (const expected_row& row : read_expected()) {
    std::string cell = std::to_string(row.peak_reserved_mib);
    if (row.source == "rerun") {
      cell += " r";
    } else if (!row.rerun_mib.empty() && row.rerun_mib != std::to_string(row.peak_reserved_mib)) {
      cell += " (" + row.rerun_mib + ")";
    }
    cells[{row.trace, row.config}] = cell;
  }
  std::ifstream in(data_dir + "README.md");
  ASSERT_TRUE(in.good()) << data_dir << "README.md is missing";
  std::vector<std::string> columns;  // the table's trace names
  std::size_t compared = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, '|');) {
      const auto first = cell.find_first_not_of(' ');
      f.push_back(first == std::string::npos ? "" : cell.substr(first, cell.find_last_not_of(' ') - first + 1));
    }
    if (f.size() < 3) continue;
    if (f[1] == "config") {
      columns.assign(f.begin() + 2, f.end());
    } else if (!columns.empty() && f[1].size() > 2 && f[1].front() == '`') {
      std::string config = f[1].substr(1, f[1].size() - 2);
      if (config == "(default)") config.clear();
      ASSERT_EQ(f.size(), columns.size() + 2) << line;
      for (std::size_t i = 0; i < columns.size(); ++i) {
        const auto found = cells.find({columns[i], config});
        ASSERT_NE(found, cells.end()) << "README.md shows " << columns[i] << " with '" << config
                                      << "', which expected.csv does not list";
        EXPECT_EQ(f[i + 2], found->second) << columns[i] << " with '" << config << "'";
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, cells.size()) << "README.md's table and expected.csv must list the same cells";
}

TEST(sim_trace_parity_data, EveryTraceInExpectedCsvIsReplayed) {
  for (const expected_row& row : read_expected()) {
    bool listed = false;
    for (const trace_file& t : traces) listed = listed || row.trace == t.name;
    EXPECT_TRUE(listed) << "expected.csv line " << row.line << " names '" << row.trace
                        << "', which sim_trace_parity_test's list of traces lacks";
  }
}

}  // namespace
}  // namespace streampool::test
