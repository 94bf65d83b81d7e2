// Size rounding (docs/pytorch-compatibility.md §2.4), segment sizes (§2.5) and split rules (§2.7) of size_policy, and the
// same rules observed through the allocator's statistics.
#include <gtest/gtest.h>

#include "native/size_rounding.hpp"
#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

using native::size_policy;

TEST(size_rounding, DefaultRoundsTo512Multiples) {
  const allocator_config config = parse_config("");
  const size_policy p(config);
  EXPECT_EQ(p.round_size(1), 512u);
  EXPECT_EQ(p.round_size(511), 512u);
  EXPECT_EQ(p.round_size(512), 512u);
  EXPECT_EQ(p.round_size(513), 1024u);
  EXPECT_EQ(p.round_size(1200), 1536u);
  EXPECT_EQ(p.round_size(84 * MiB + 1), 84 * MiB + 512);
}

TEST(size_rounding, PowerOfTwoDivisionsSpecExamples) {
  const allocator_config d4 = parse_config("roundup_power2_divisions:4");
  const size_policy p4(d4);
  EXPECT_EQ(p4.round_size(1200), 1536u) << "1200 <= 512*4: not power-rounded";
  EXPECT_EQ(p4.round_size(84 * MiB), 96 * MiB);
  EXPECT_EQ(p4.round_size(64 * MiB), 64 * MiB) << "powers of two are kept";
  EXPECT_EQ(p4.round_size(2049), 2560u) << "2049 > 2048: step 512 from floor 2048";
  EXPECT_EQ(p4.round_size(3000), 3072u);
  const allocator_config d8 = parse_config("roundup_power2_divisions:8");
  EXPECT_EQ(size_policy(d8).round_size(84 * MiB), 88 * MiB);
}

TEST(size_rounding, DivisionListForm) {
  const allocator_config c = parse_config("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
  const size_policy p(c);
  EXPECT_EQ(p.round_size(84 * MiB), 88 * MiB) << "[64,128) MiB uses 8 divisions";
  EXPECT_EQ(p.round_size(400 * MiB), 512 * MiB) << "[256,512) MiB uses 2 divisions";
  EXPECT_EQ(p.round_size(1200 * MiB), 1200 * MiB) << "1 division: plain 512 rounding";
  EXPECT_EQ(p.round_size(3 * MiB + 1), 3 * MiB + 256 * KiB) << "below 64 MiB the first entry back-fills 8";
}

TEST(size_rounding, BypassThresholdSkipsPowerRounding) {
  const allocator_config c = parse_config("roundup_power2_divisions:4,roundup_bypass_threshold_mb:64");
  const size_policy p(c);
  EXPECT_EQ(p.round_size(40 * MiB + 1), 48 * MiB) << "below the threshold: power-of-two divisions";
  EXPECT_EQ(p.round_size(64 * MiB + 1), 64 * MiB + 512) << "above it: 512-multiple only";
  EXPECT_EQ(p.round_size(84 * MiB), 84 * MiB);
}

TEST(size_rounding, PowerDivisionHelper) {
  EXPECT_EQ(size_policy::roundup_power2_division(5 * MiB, 4), 5 * MiB);
  EXPECT_EQ(size_policy::roundup_power2_division(5 * MiB + 1, 4), 6 * MiB);
  EXPECT_EQ(size_policy::roundup_power2_division(3, 4), 4u) << "step 0: next power of two";
}

TEST(segment_size, PoolsAndSegments) {
  const allocator_config c = parse_config("");
  const size_policy p(c);
  EXPECT_TRUE(size_policy::is_small(1 * MiB));
  EXPECT_FALSE(size_policy::is_small(1 * MiB + 512));
  EXPECT_EQ(p.allocation_size(512), 2 * MiB);
  EXPECT_EQ(p.allocation_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(p.allocation_size(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(p.allocation_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(p.allocation_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(p.allocation_size(10 * MiB + 512), 12 * MiB);
  const allocator_config big = parse_config("large_segment_size_mb:64");
  EXPECT_EQ(size_policy(big).allocation_size(5 * MiB), 64 * MiB);
}

TEST(split_rules, SmallAndLarge) {
  const allocator_config c = parse_config("max_split_size_mb:40");
  const size_policy p(c);
  EXPECT_TRUE(p.should_split(true, 2 * MiB, 2 * MiB - 512)) << "small: remaining 512 splits";
  EXPECT_FALSE(p.should_split(true, 2 * MiB, 2 * MiB));
  EXPECT_TRUE(p.should_split(false, 20 * MiB, 18 * MiB)) << "large: remaining 2 MiB > 1 MiB";
  EXPECT_FALSE(p.should_split(false, 20 * MiB, 19 * MiB)) << "large: remaining exactly 1 MiB does not split";
  EXPECT_FALSE(p.should_split(false, 100 * MiB, 40 * MiB)) << "request >= max_split_size never splits";
  EXPECT_TRUE(p.may_reuse(30 * MiB, 20 * MiB));
  EXPECT_FALSE(p.may_reuse(40 * MiB, 20 * MiB)) << "oversize block for a normal request";
  EXPECT_TRUE(p.may_reuse(59 * MiB, 40 * MiB)) << "within max_non_split_rounding (20 MiB)";
  EXPECT_FALSE(p.may_reuse(60 * MiB, 40 * MiB));
}

// Issue 31: a saturating max_non_split_rounding_mb prints "unlimited"; it used to wrap in
// rounded + slack and reuse no oversize block at all.
TEST(split_rules, UnlimitedNonSplitRoundingReusesAnyOversizeBlock) {
  for (const char* text : {"max_split_size_mb:40,max_non_split_rounding_mb:99999999999999999",
                           "max_split_size_mb:40,max_non_split_rounding_mb:17592186044415"}) {
    const allocator_config c = parse_config(text);
    const size_policy p(c);
    EXPECT_TRUE(p.may_reuse(60 * MiB, 40 * MiB)) << text;
    EXPECT_TRUE(p.may_reuse(std::size_t{1} << 40, 40 * MiB)) << text;
    EXPECT_FALSE(p.may_reuse(60 * MiB, 20 * MiB)) << text << ": a normal request still takes no oversize block";
  }
  native_env env("max_split_size_mb:40,max_non_split_rounding_mb:99999999999999999");
  void* big = env.alloc->allocate(100 * MiB);
  env.alloc->deallocate(big);
  void* q = env.alloc->allocate(45 * MiB);
  EXPECT_EQ(q, big) << "unlimited slack: the free 100 MiB block serves 45 MiB";
  EXPECT_EQ(env.stats().reserved_bytes[all].peak, static_cast<std::int64_t>(100 * MiB));
  env.alloc->deallocate(q);
}

TEST(size_rounding, ObservedThroughAllocator) {
  native_env env("roundup_power2_divisions:8");
  void* p = env.alloc->allocate(84 * MiB);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.allocated_bytes[all].current, static_cast<std::int64_t>(88 * MiB));
  EXPECT_EQ(s.requested_bytes[all].current, static_cast<std::int64_t>(84 * MiB));
  EXPECT_EQ(s.reserved_bytes[all].current, static_cast<std::int64_t>(88 * MiB));
  env.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::test
