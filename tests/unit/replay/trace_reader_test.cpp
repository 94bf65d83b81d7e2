// trace_reader_test.cpp — the trace CSV parser: valid input, and an error naming the line and the
// problem for every kind of malformed input.
#include <gtest/gtest.h>

#include <sstream>

#include "streampool/errors.hpp"
#include "streampool/replay.hpp"

namespace streampool {
namespace {

std::vector<trace_event> parse(const std::string& text) {
  std::istringstream in(text);
  return parse_trace(in, "t.csv");
}

std::string error_of(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

TEST(trace_reader, ParsesEveryAction) {
  const auto events = parse(
      "action,addr,size,stream,time_us\r\n"
      "segment_alloc,4096,2097152,0,1\n"
      "alloc,4096,100,7,2\n"
      "\n"
      "free_requested,4096,100,7,3\n"
      "free_completed,4096,100,7,4\n");
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].action, trace_action::segment_alloc);
  EXPECT_EQ(events[1].action, trace_action::alloc);
  EXPECT_EQ(events[1].stream, 7u);
  EXPECT_EQ(events[1].size, 100u);
  EXPECT_EQ(events[3].line, 6u);
  EXPECT_EQ(events[3].time_us, 4u);
}

TEST(trace_reader, RejectsMalformedLinesWithTheLineNumber) {
  const std::string header = "action,addr,size,stream,time_us\n";
  EXPECT_NE(error_of("").find("line 1: empty trace"), std::string::npos);
  EXPECT_NE(error_of("a,b\n").find("line 1: header is 'a,b'"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,1,2,3\n").find("t.csv line 2: 4 field(s); expected 5"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,1,2,3,4,5\n").find("line 2: more than 5 fields"), std::string::npos);
  EXPECT_NE(error_of(header + "malloc,1,2,3,4\n").find("line 2: unknown action 'malloc'"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,1,-2,3,4\n").find("line 2: field 'size' is '-2'"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,0x10,2,3,4\n").find("field 'addr' is '0x10'"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,1,2,,4\n").find("field 'stream' is ''"), std::string::npos);
}

TEST(trace_reader, MissingFileIsAClearError) {
  try {
    (void)read_trace("/nonexistent/trace.csv");
    FAIL() << "expected an error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/trace.csv: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)read_trace("/nonexistent/trace.csv.gz"), error);
}

TEST(trace_reader, ReadsTheGzipTraceOfTheTestData) {
  const std::string path = std::string(STREAMPOOL_TEST_DATA_DIR) + "/encoder_varlen.trace.csv.gz";
  const std::vector<trace_event> events = read_trace(path);  // in the repository: never skipped
  EXPECT_EQ(events.size(), 82319u);  // tests/data/README.md: 82,319 events
  std::size_t segment_bytes = 0;
  for (const auto& e : events) {
    if (e.action == trace_action::segment_alloc) segment_bytes += e.size;
  }
  EXPECT_EQ(segment_bytes, std::size_t{24364} * 1024 * 1024);  // tests/data/README.md: PyTorch reserved 24364 MiB
}

}  // namespace
}  // namespace streampool
