// overflow_bounds_test.cpp — issue 31: every numeric key is checked at parse time where its value
// becomes bytes, pages or counts (Note [Upper bound of segment sizes], Note [Upper bound of
// roundup divisions] in src/config/key_parsers.cpp). Each value below used to parse and then wrap:
// an accepted config must never crash or misbehave in the allocator.
#include <gtest/gtest.h>

#include <string>

#include "unit/config/config_test_support.hpp"

namespace streampool::test {
namespace {

// `large_segment_size_mb:17592186044415` (2^44 - 1 MiB) fit size_t as bytes, then wrapped to 0
// when rounded up to 2 MiB pages: SIGFPE at the first allocation with expandable segments.
TEST(config_overflow, LargeSegmentSizeIsBoundedWhereRoundingWouldWrap) {
  EXPECT_EQ(parse_config("large_segment_size_mb:16777216").large_segment_size, std::size_t{1} << 44);
  for (const char* value : {"16777217", "17592186044415", "17592186044416"}) {
    expect_config_error("expandable_segments:True,large_segment_size_mb:" + std::string(value),
                        "large_segment_size_mb", 25,
                        {"is too large", value, "at most 16777216", "16 TiB", "> 10 (MiB)"});
  }
}

// pinned_reserve_segment_size_mb >= 2^44 wrapped when multiplied by 1 MiB (off, or 1 MiB).
TEST(config_overflow, PinnedReserveSegmentSizeIsBounded) {
  EXPECT_EQ(parse_config("pinned_reserve_segment_size_mb:16777216").pinned_reserve_segment_size_mb,
            std::size_t{1} << 24);
  for (const char* value : {"16777217", "17592186044416", "17592186044417"}) {
    expect_config_error("pinned_reserve_segment_size_mb:" + std::string(value), "pinned_reserve_segment_size_mb",
                        0, {"is too large", value, "at most 16777216", "16 TiB"});
  }
}

TEST(config_overflow, ExpandableSegmentsReserveGigabytesIsBounded) {
  EXPECT_EQ(parse_config("expandable_segments_reserve:16384G").expandable_segments_reserve_bytes,
            std::size_t{1} << 44);
  expect_config_error("expandable_segments_reserve:16385G", "expandable_segments_reserve", 0,
                      {"is too large", "at most 16384G"});
  expect_config_error("expandable_segments_reserve:17179869183G", "expandable_segments_reserve", 0,
                      {"is too large", "at most 16384G"});
}

// 512 x D wrapped for D >= 2^55, turning rounding on for every request instead of off.
TEST(config_overflow, RoundupDivisionsAreBoundedWhereTheGuardWouldWrap) {
  EXPECT_EQ(parse_config("roundup_power2_divisions:18014398509481984").roundup_power2_divisions[0],
            std::size_t{1} << 54);
  expect_config_error("roundup_power2_divisions:36028797018963968", "roundup_power2_divisions", 0,
                      {"divisions 36028797018963968 is too large", "at most 18014398509481984", "2^54"});
  expect_config_error("roundup_power2_divisions:[1:36028797018963968,>:0]", "roundup_power2_divisions", 0,
                      {"divisions 36028797018963968 is too large"});
  expect_config_error("roundup_power2_divisions:[>:9223372036854775808]", "roundup_power2_divisions", 0,
                      {"is too large"});
}

// The threshold keys saturate (PyTorch clamps max_split_size_mb the same way): any huge value is
// accepted and means "no limit", which is what the allocator then does (size_rounding_test).
TEST(config_overflow, ThresholdKeysSaturate) {
  for (const char* value : {"17592186044415", "17592186044416", "18446744073709551615"}) {
    const allocator_config config = parse_config("max_split_size_mb:" + std::string(value) +
                                                 ",max_non_split_rounding_mb:" + value +
                                                 ",roundup_bypass_threshold_mb:" + value);
    EXPECT_GE(config.max_split_size, (std::size_t{1} << 63)) << value;
    EXPECT_GE(config.max_non_split_rounding, (std::size_t{1} << 63)) << value;
    EXPECT_GE(config.roundup_bypass_threshold, (std::size_t{1} << 63)) << value;
  }
  expect_config_error("max_split_size_mb:18446744073709551616", "max_split_size_mb", 0, {"is too large"});
}

}  // namespace
}  // namespace streampool::test
