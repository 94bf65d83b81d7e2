// isolated_run_test.cpp — rows in child processes (perf/isolated_run.hpp): the encoding of a
// child's rows, and the real thing: streampool-bench replay / compare with one backend made to
// crash (STREAMPOOL_BENCH_TEST_CRASH) still print the other rows, with "crashed (signal 11...)"
// in the crashed one and exit status 1.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "isolated_run.hpp"

namespace streampool::bench {
namespace {

TEST(child_rows, EncodingRoundTrips) {
  child_rows rows;
  rows.rows.push_back({cell(), std::string("native"), std::string("a,b 'c'\n\"d\""), std::int64_t{-42}, 0.1});
  rows.rows.push_back({std::string(""), std::int64_t{9007199254740993}, 1e300});
  rows.series.push_back({"native reserved", 3, true, {{0.0, 1.5}, {2.0, -0.25}}});
  rows.series.push_back({"native allocated", 3, true, {{0.0, 1.0}}, /*in_legend=*/false});
  rows.status = 1;
  const child_rows back = decode_child_rows(encode_child_rows(rows));
  ASSERT_EQ(back.rows.size(), 2u);
  EXPECT_EQ(back.rows[0], rows.rows[0]) << "values, types and odd characters survive";
  EXPECT_EQ(back.rows[1], rows.rows[1]);
  ASSERT_EQ(back.series.size(), 2u);
  EXPECT_EQ(back.series[0].name, "native reserved");
  EXPECT_EQ(back.series[0].color, 3);
  EXPECT_TRUE(back.series[0].dashed);
  EXPECT_EQ(back.series[0].points, rows.series[0].points);
  EXPECT_TRUE(back.series[0].in_legend);
  EXPECT_FALSE(back.series[1].in_legend) << "a dashed twin stays out of the legend (it was listed: 8 entries, 3 lines)";
  EXPECT_EQ(back.status, 1);
}

TEST(child_rows, TruncatedOrForeignTextIsRefused) {
  child_rows rows;
  rows.rows.push_back({std::string("x")});
  const std::string text = encode_child_rows(rows);
  EXPECT_THROW((void)decode_child_rows(text.substr(0, text.size() - 4)), usage_error) << "no end record";
  EXPECT_THROW((void)decode_child_rows(""), usage_error);
  EXPECT_THROW((void)decode_child_rows("R 2\n-\n"), usage_error);
  EXPECT_THROW((void)decode_child_rows("hello\nX 0\n"), usage_error);
}

TEST(child_rows, BackendArgumentKeepsTheConfigInOneEntry) {
  EXPECT_EQ(backend_argument("cuda", ""), "cuda");
  EXPECT_EQ(backend_argument("native", "expandable_segments:True,max_split_size_mb:256"),
            "native=expandable_segments:True;max_split_size_mb:256");
}

struct run_result {
  int status = -1;
  std::string output;
};

run_result run(const std::string& command) {
  run_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) r.output += buffer;
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string bench() { return std::string("'") + STREAMPOOL_BENCH_BINARY + "'"; }

TEST(child_rows, AReplayRowThatCrashesCostsOnlyItsRow) {
  const std::string trace = std::string(STREAMPOOL_BENCH_TESTDATA) + "/small.trace.csv";
  const run_result r = run("STREAMPOOL_BENCH_TEST_CRASH=cuda " + bench() + " replay --driver sim --trace '" + trace +
                           "' --backends native,cuda,async-raw --format csv --quiet 2>/dev/null");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("crashed (signal 11"), std::string::npos) << r.output;
  for (const char* other : {"\nnative,default,", "\nasync-raw,default,", "pytorch (recorded)"}) {
    EXPECT_NE(r.output.find(other), std::string::npos) << "row '" << other << "' is missing:\n" << r.output;
  }
  // The rows that ran have their figures: the native row's peak requested is a number.
  const std::size_t native = r.output.find("\nnative,default,");
  ASSERT_NE(native, std::string::npos);
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(r.output[native + 16]))) << r.output.substr(native, 80);
}

TEST(child_rows, ACompareRowThatCrashesCostsOnlyItsRow) {
  const run_result r = run("STREAMPOOL_BENCH_TEST_CRASH=native " + bench() +
                           " compare --driver sim --quick --backends native,cuda --format csv --quiet 2>/dev/null");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("native,default"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("crashed (signal 11"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ncuda,default,"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("crashed", r.output.find("\ncuda,default,")), std::string::npos) << "cuda ran";
}

TEST(child_rows, ALatencyBackendThatCrashesCostsOnlyItsRows) {
  const run_result r = run("STREAMPOOL_BENCH_TEST_CRASH=cuda " + bench() +
                           " latency --driver sim --backends native,cuda --sizes 512,4KiB --threads 1,2 --iterations 50"
                           " --repeat 1 --format csv --quiet 2>/dev/null");
  EXPECT_EQ(r.status, 1) << r.output;
  std::size_t native_rows = 0, crashed_rows = 0;
  for (std::size_t at = r.output.find("\nnative,"); at != std::string::npos; at = r.output.find("\nnative,", at + 1)) {
    ++native_rows;
  }
  for (std::size_t at = r.output.find("crashed (signal 11"); at != std::string::npos;
       at = r.output.find("crashed (signal 11", at + 1)) {
    ++crashed_rows;
  }
  EXPECT_EQ(native_rows, 4u) << "2 sizes x 2 thread counts: " << r.output;
  EXPECT_EQ(crashed_rows, 4u) << r.output;
  // Table order is kept: size, then threads, then backend.
  EXPECT_LT(r.output.find("\nnative,default,512B,512,1,"), r.output.find("\ncuda,default,512B,512,1,")) << r.output;
  EXPECT_LT(r.output.find("\ncuda,default,512B,512,1,"), r.output.find("\nnative,default,512B,512,2,")) << r.output;
}

TEST(child_rows, InProcessRunsWithoutChildren) {
  const std::string trace = std::string(STREAMPOOL_BENCH_TESTDATA) + "/small.trace.csv";
  const run_result r = run("STREAMPOOL_BENCH_TEST_CRASH=cuda " + bench() + " replay --driver sim --trace '" + trace +
                           "' --backends native,cuda --in-process --format csv --quiet 2>/dev/null");
  EXPECT_EQ(r.status, 0) << "the crash hook acts only in a child:\n" << r.output;
  EXPECT_EQ(r.output.find("crashed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace streampool::bench
