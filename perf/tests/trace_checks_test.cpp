// trace_checks_test.cpp — what `replay` learns from a trace before replaying it: PyTorch's recorded
// peak reserved (Note [PyTorch's recorded peak reserved], replay_run.cpp) and the consistency check
// that answers an inconsistent trace once, in the parent (check_trace_events, trace_input.hpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "replay_run.hpp"
#include "trace_handoff.hpp"
#include "trace_input.hpp"

namespace streampool::bench {
namespace {

constexpr std::uint64_t mib = 1 << 20;

trace_event ev(trace_action action, std::uint64_t address, std::uint64_t size, std::size_t line) {
  trace_event e;
  e.action = action;
  e.address = address;
  e.size = size;
  e.line = line;
  return e;
}

TEST(recorded_figures, PeakReservedIsTheRunningPeakNotTheSumOfSegments) {
  // A 20 MiB segment used and freed, then another: 20 MiB held at most, 40 MiB ever allocated.
  const std::vector<trace_event> events = {
      ev(trace_action::segment_alloc, 1000, 20 * mib, 2), ev(trace_action::alloc, 1000, 10 * mib, 3),
      ev(trace_action::free_requested, 1000, 10 * mib, 4), ev(trace_action::segment_free, 1000, 20 * mib, 5),
      ev(trace_action::segment_alloc, 2000, 20 * mib, 6), ev(trace_action::alloc, 2000, 10 * mib, 7),
      ev(trace_action::free_requested, 2000, 10 * mib, 8)};
  const recorded_run r = recorded_figures(events);
  EXPECT_EQ(r.peak_reserved, 20 * mib);
  EXPECT_EQ(r.segment_bytes, 40 * mib);
  EXPECT_EQ(r.segment_allocs, 2u);
  EXPECT_EQ(r.segment_frees, 1u);
  EXPECT_EQ(r.peak_requested, 10 * mib);
  EXPECT_TRUE(r.has_segments());
}

TEST(recorded_figures, ExpandablePagesAndFreesOfUnknownSegments) {
  const std::vector<trace_event> events = {
      ev(trace_action::segment_free, 5000, 64 * mib, 2),  // allocated before recording: subtracts nothing
      ev(trace_action::segment_map, 9000, 2 * mib, 3),    ev(trace_action::segment_map, 9000 + 2 * mib, 4 * mib, 4),
      ev(trace_action::segment_unmap, 9000, 2 * mib, 5),  ev(trace_action::segment_map, 9000, 1 * mib, 6),
      ev(trace_action::segment_unmap, 1, 100 * mib, 7)};  // more than held: the total stops at 0
  const recorded_run r = recorded_figures(events);
  EXPECT_EQ(r.peak_reserved, 6 * mib);
  EXPECT_EQ(r.segment_maps, 3u);
  EXPECT_EQ(r.segment_unmaps, 2u);
  EXPECT_TRUE(r.has_segments());
  EXPECT_FALSE(recorded_figures({ev(trace_action::alloc, 1, 1, 2)}).has_segments());
}

TEST(trace_checks, AnAllocOfALiveAddressIsFoundBeforeAnyReplay) {
  const std::vector<trace_event> bad = {ev(trace_action::alloc, 7, 4096, 2), ev(trace_action::alloc, 7, 8192, 3)};
  try {
    check_trace_events(bad, "t.csv");
    FAIL() << "accepted";
  } catch (const usage_error& e) {
    EXPECT_EQ(std::string(e.what()), "--trace: 't.csv' line 3: alloc of address 7 which is still live (allocated "
                                     "at line 2 and not freed since); the trace is inconsistent");
  }
  // Freed in between, or a zero-size alloc (a no-op): consistent.
  EXPECT_NO_THROW(check_trace_events({ev(trace_action::alloc, 7, 4096, 2), ev(trace_action::free_requested, 7, 4096, 3),
                                      ev(trace_action::alloc, 7, 8192, 4)},
                                     "t.csv"));
  EXPECT_NO_THROW(check_trace_events({ev(trace_action::alloc, 7, 0, 2), ev(trace_action::alloc, 7, 8, 3)}, "t.csv"));
}

TEST(trace_checks, DirectoriesAndDevicesAreRefusedBeforeReading) {
  common_options opts;
  opts.quiet = true;
  for (const auto& [path, what] : {std::pair<std::string, std::string>{"/tmp", "is a directory"},
                                   {"/dev/zero", "is a character device"}}) {
    try {
      (void)load_trace_input(path, 0, opts);
      ADD_FAILURE() << path << " accepted";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

// Note [Children get the parsed trace]: what the parent shares is what a child reads, field for
// field, without opening --trace (the path given here does not exist).
TEST(trace_handoff, AChildGetsTheParentsEvents) {
  std::vector<trace_event> events = {ev(trace_action::segment_alloc, 1 << 21, 2 * mib, 2),
                                     ev(trace_action::alloc, 1 << 21, 4096, 3), ev(trace_action::free_requested, 1 << 21, 4096, 4)};
  events[1].stream = 77;
  events[1].time_us = 123456789;
  const shared_trace shared(events);
  EXPECT_FALSE(inherited_trace_events().has_value()) << "not a row's child: nothing inherited";
  ::setenv("STREAMPOOL_BENCH_ROW_FD", "-1", 1);  // as in a row's child (is_row_child)
  ::setenv("STREAMPOOL_BENCH_DATA_FD", std::to_string(shared.fd()).c_str(), 1);
  common_options opts;
  opts.quiet = true;
  trace_file got;
  try {
    got = load_trace_input("/no/such/trace.csv", 0, opts);
  } catch (...) {
    ::unsetenv("STREAMPOOL_BENCH_ROW_FD");
    ::unsetenv("STREAMPOOL_BENCH_DATA_FD");
    throw;
  }
  ::unsetenv("STREAMPOOL_BENCH_ROW_FD");
  ::unsetenv("STREAMPOOL_BENCH_DATA_FD");
  ASSERT_EQ(got.events.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(got.events[i].action, events[i].action) << i;
    EXPECT_EQ(got.events[i].address, events[i].address) << i;
    EXPECT_EQ(got.events[i].size, events[i].size) << i;
    EXPECT_EQ(got.events[i].stream, events[i].stream) << i;
    EXPECT_EQ(got.events[i].time_us, events[i].time_us) << i;
    EXPECT_EQ(got.events[i].line, events[i].line) << i;
  }
}

}  // namespace
}  // namespace streampool::bench
