// sleep_windows_test.cpp — plan_sleep_windows (src/native/sleep_windows.hpp, Note [Sleep pipeline]):
// windows of whole pages per segment, and the live runs clipped to them with their host offsets.
#include <gtest/gtest.h>

#include <vector>

#include "native/block.hpp"
#include "native/sleep_windows.hpp"

namespace streampool::native {
namespace {

TEST(sleep_windows, PagesAreCutPerSegmentAndRunsClippedToTheirWindow) {
  constexpr std::size_t page = 1000;
  segment a;
  a.base = 100000;
  a.page = page;
  segment b;
  b.base = 10000;  // below a: segments need not be in address order
  b.page = page;
  std::vector<sleeping_segment> segments(2);
  segments[0].seg = &a;
  segments[0].pages = {0, 1, 2, 4, 5};  // page 3 unmapped
  segments[1].seg = &b;
  segments[1].pages = {0};
  // Runs in the order sleep builds them: a's, then b's; one crosses a's window boundary.
  const std::vector<backup_run> runs = {{100500, 2000, 0}, {104000, 1500, 2000}, {10000, 300, 3500}};
  std::vector<backup_run> pieces;
  const std::vector<sleep_window> w = plan_sleep_windows(segments, runs, 2 * page, pieces);
  ASSERT_EQ(w.size(), 4u);  // a: {0,1} {2,4} {5}; b: {0}
  EXPECT_EQ(w[0].segment, 0u);
  EXPECT_EQ(w[0].first_page, 0u);
  EXPECT_EQ(w[0].end_page, 2u);
  EXPECT_EQ(w[1].first_page, 2u);
  EXPECT_EQ(w[1].end_page, 4u);
  EXPECT_EQ(w[2].end_page, 5u);
  EXPECT_EQ(w[3].segment, 1u);
  ASSERT_EQ(pieces.size(), 5u);
  // window 0 = [100000, 102000): the first run's first 1500 bytes
  EXPECT_EQ(w[0].first_run, 0u);
  EXPECT_EQ(w[0].end_run, 1u);
  EXPECT_EQ(pieces[0].device, 100500u);
  EXPECT_EQ(pieces[0].bytes, 1500u);
  EXPECT_EQ(pieces[0].offset, 0u);
  // window 1 = [102000, 105000): the rest of the first run, and the second run's first 1000
  EXPECT_EQ(w[1].end_run, 3u);
  EXPECT_EQ(pieces[1].device, 102000u);
  EXPECT_EQ(pieces[1].bytes, 500u);
  EXPECT_EQ(pieces[1].offset, 1500u);
  EXPECT_EQ(pieces[2].device, 104000u);
  EXPECT_EQ(pieces[2].bytes, 1000u);
  // window 2 = [105000, 106000): the second run's last 500, at host offset 2000 + 1000
  EXPECT_EQ(pieces[3].device, 105000u);
  EXPECT_EQ(pieces[3].bytes, 500u);
  EXPECT_EQ(pieces[3].offset, 3000u);
  // b's window
  EXPECT_EQ(w[3].first_run, 4u);
  EXPECT_EQ(pieces[4].device, 10000u);
  EXPECT_EQ(pieces[4].offset, 3500u);
}

TEST(sleep_windows, RunsOnNoWindowAreLeftOutAndAWindowIsAtLeastAPage) {
  segment a;
  a.base = 0x10000;
  a.page = 0x1000;
  std::vector<sleeping_segment> segments(1);
  segments[0].seg = &a;
  segments[0].pages = {1};  // only page 1 went (a rollback after a refused unmap)
  const std::vector<backup_run> runs = {{0x10000, 0x3000, 0}};
  std::vector<backup_run> pieces;
  const std::vector<sleep_window> w = plan_sleep_windows(segments, runs, 1, pieces);
  ASSERT_EQ(w.size(), 1u);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].device, 0x11000u);
  EXPECT_EQ(pieces[0].bytes, 0x1000u);
  EXPECT_EQ(pieces[0].offset, 0x1000u);
}

}  // namespace
}  // namespace streampool::native
