// checking_mode_test.cpp — checking mode (debug_checks:True) on the sim, for both backends: an
// intact canary is silent, a planted overrun is reported naming the allocation, the block is
// freed all the same, and a read after free sees the poison.
#include <algorithm>
#include <cstdio>

#include "check/check_layout.hpp"
#include "check_test_support.hpp"
#include "core/format.hpp"

namespace streampool::testing {
namespace {

using check_impl::canary_byte;
using check_impl::padded_size;
using check_impl::poison_byte;

TEST(check_layout, CanaryIsAtLeast64BytesAndEndsOnA512ByteBoundary) {
  EXPECT_EQ(padded_size(1), 512u);
  EXPECT_EQ(padded_size(448), 512u);   // 64 bytes of canary
  EXPECT_EQ(padded_size(449), 1024u);  // 575
  EXPECT_EQ(padded_size(512), 1024u);  // a multiple of 512 still gets 512
  EXPECT_EQ(padded_size(1000), 1536u);
  for (std::size_t n : {1ul, 63ul, 64ul, 447ul, 448ul, 449ul, 511ul, 512ul, 513ul, 4096ul, 1000000ul}) {
    EXPECT_GE(padded_size(n) - n, check_impl::min_canary_bytes) << n;
    EXPECT_LT(padded_size(n) - n, check_impl::min_canary_bytes + check_impl::check_granularity) << n;
    EXPECT_EQ(padded_size(n) % check_impl::check_granularity, 0u) << n;
  }
}

using checking_mode = checking_test;

TEST_P(checking_mode, CanaryIsWrittenAfterTheRequestedEnd) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(1000, s);
  const std::vector<std::uint8_t> canary = read(static_cast<std::uint8_t*>(p) + 1000, padded_size(1000) - 1000);
  EXPECT_TRUE(std::all_of(canary.begin(), canary.end(), [](std::uint8_t b) { return b == canary_byte; }));
  alloc_->deallocate(p);
  expect_nothing_left();
}

TEST_P(checking_mode, IntactCanaryIsNotReported) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(1000, s);
  write(p, 0, 1000, 0x11);  // the program uses every byte it asked for, and no more
  alloc_->deallocate(p);
  EXPECT_TRUE(warnings_.messages().empty()) << warnings_.messages().front();
  EXPECT_EQ(sim_->calls(driver_call::check_bytes), 1u);
  expect_nothing_left();
}

TEST_P(checking_mode, OverrunIsReportedNamingTheAllocation) {
  const stream_t s = new_stream();
  void* first = alloc_->allocate(64, s);
  void* p = alloc_->allocate(1000, s);
  write(p, 0, 1003, 0x42);  // three bytes too many
  alloc_->deallocate(p);
  const std::vector<std::string> reports = warnings_.containing("buffer overrun");
  ASSERT_EQ(reports.size(), 1u) << ::testing::PrintToString(warnings_.messages());
  const std::string& report = reports.front();
  EXPECT_NE(report.find("allocation #2 "), std::string::npos) << report;
  EXPECT_NE(report.find("1000 bytes requested at " + core::format_pointer(p)), std::string::npos) << report;
  EXPECT_NE(report.find("device 0"), std::string::npos) << report;
  EXPECT_NE(report.find("stream " + core::format_pointer(s)), std::string::npos) << report;
  EXPECT_NE(report.find("time_us "), std::string::npos) << report;
  EXPECT_NE(report.find("3 of the 536 canary bytes"), std::string::npos) << report;
  EXPECT_NE(report.find("at byte 1000 (0 past the end) holds 0x42 instead of 0xfd"), std::string::npos) << report;
  // Nothing lost: the block went back although the program overran it.
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 1);
  alloc_->deallocate(first);
  EXPECT_EQ(warnings_.containing("buffer overrun").size(), 1u);
  expect_nothing_left();
}

TEST_P(checking_mode, OverrunDeepInTheCanaryIsFound) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(4096, s);
  write(p, 4096 + 300, 1, 0x00);  // a stray store 300 bytes past the end
  alloc_->deallocate(p);
  const std::vector<std::string> reports = warnings_.containing("buffer overrun");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports.front().find("1 of the 512 canary bytes"), std::string::npos) << reports.front();
  EXPECT_NE(reports.front().find("at byte 4396 (300 past the end) holds 0x00"), std::string::npos)
      << reports.front();
  expect_nothing_left();
}

TEST_P(checking_mode, ReportTimeMatchesTheTraceAllocEntry) {
  alloc_->record_history(true);
  const stream_t s = new_stream();
  void* p = alloc_->allocate(100, s);
  write(p, 100, 1, 0x01);
  alloc_->deallocate(p);
  const std::vector<std::string> reports = warnings_.containing("buffer overrun");
  ASSERT_EQ(reports.size(), 1u);
  const std::vector<trace_entry> trace = alloc_->trace(0);
  const auto alloc_entry = std::find_if(trace.begin(), trace.end(), [&](const trace_entry& e) {
    return e.action == trace_action::alloc && e.address == reinterpret_cast<std::uintptr_t>(p);
  });
  ASSERT_NE(alloc_entry, trace.end());
  // The report's time and the trace entry's are taken within the same allocate() call.
  const std::size_t at = reports.front().find("time_us ") + 8;
  const std::uint64_t reported = std::stoull(reports.front().substr(at));
  EXPECT_LE(alloc_entry->time_us, reported);
  EXPECT_LE(reported - alloc_entry->time_us, 1'000'000u);
  EXPECT_EQ(alloc_entry->size, padded_size(100));  // the backend sees the padded request
  expect_nothing_left();
}

TEST_P(checking_mode, FreedBlockReadsPoison) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(2000, s);
  write(p, 0, 2000, 0x5A);  // plausible data
  alloc_->deallocate(p);
  const std::vector<std::uint8_t> after = read(p, padded_size(2000));  // a kernel reading after free
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](std::uint8_t b) { return b == poison_byte; }));
  EXPECT_TRUE(warnings_.messages().empty());
  expect_nothing_left();
}

TEST_P(checking_mode, WithoutChecksAReadAfterFreeSeesStaleData) {
  build("");  // the contrast: what checking mode exists for
  const stream_t s = new_stream();
  void* p = alloc_->allocate(2000, s);
  write(p, 0, 2000, 0x5A);
  alloc_->deallocate(p);
  const std::vector<std::uint8_t> after = read(p, 2000);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](std::uint8_t b) { return b == 0x5A; }));
  expect_nothing_left();
}

TEST_P(checking_mode, ReusedBlockGetsAFreshCanary) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(1000, s);
  alloc_->deallocate(p);  // poisoned: its canary bytes now hold 0xff
  void* q = alloc_->allocate(1000, s);
  EXPECT_EQ(q, p);  // same stream, same size: both backends hand the block out again
  alloc_->deallocate(q);
  EXPECT_TRUE(warnings_.messages().empty()) << warnings_.messages().front();
  expect_nothing_left();
}

TEST_P(checking_mode, ManyAllocationsEachReportedByNumber) {
  const stream_t s = new_stream();
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(alloc_->allocate(100 + 1000 * static_cast<std::size_t>(i), s));
  write(blocks[3], 3100, 8, 0x00);
  write(blocks[7], 7100, 1, 0x07);
  for (void* p : blocks) alloc_->deallocate(p);
  const std::vector<std::string> reports = warnings_.containing("buffer overrun");
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_NE(reports[0].find("allocation #4 (3100 bytes"), std::string::npos) << reports[0];
  EXPECT_NE(reports[1].find("allocation #8 (7100 bytes"), std::string::npos) << reports[1];
  expect_nothing_left();
}

TEST_P(checking_mode, BadFreesAreStillTheBackendsErrors) {
  const stream_t s = new_stream();
  void* p = alloc_->allocate(100, s);
  alloc_->deallocate(p);
  EXPECT_THROW(alloc_->deallocate(p), error);  // double free
  int host = 0;
  EXPECT_THROW(alloc_->deallocate(&host), error);
  EXPECT_THROW(alloc_->record_stream(&host, s), error);
  EXPECT_TRUE(warnings_.containing("buffer overrun").empty());
  expect_nothing_left();
}

TEST_P(checking_mode, LegacyStreamAndCurrentDeviceWork) {
  void* p = alloc_->allocate(10);  // legacy default stream of the current device
  write(p, 10, 1, 0x00);
  alloc_->deallocate(p);
  const std::vector<std::string> reports = warnings_.containing("buffer overrun");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports.front().find("stream 0 (the legacy default stream)"), std::string::npos) << reports.front();
  expect_nothing_left();
}

INSTANTIATE_TEST_SUITE_P(backends, checking_mode, ::testing::ValuesIn(check_cases()), check_case_name);

}  // namespace
}  // namespace streampool::testing
