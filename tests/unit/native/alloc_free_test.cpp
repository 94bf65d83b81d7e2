// Single-stream allocation and free: segment sizes (docs/pytorch-compatibility.md §2.5), best fit (§2.6), splitting (§2.7),
// oversize rules, merging on free (§2.8) and the exact statistics of §2.14.
#include <gtest/gtest.h>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

constexpr auto i64 = [](std::size_t v) { return static_cast<std::int64_t>(v); };

TEST(alloc_free, SmallRequestGetsBlockInTwoMiBSegment) {
  native_env env;
  void* p = env.alloc->allocate(100);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.allocated_bytes[small].current, 512);
  EXPECT_EQ(s.allocated_bytes[large].current, 0);
  EXPECT_EQ(s.requested_bytes[all].current, 100);
  EXPECT_EQ(s.reserved_bytes[small].current, i64(2 * MiB));
  EXPECT_EQ(s.segment[small].current, 1);
  EXPECT_EQ(s.inactive_split[small].current, 1);
  EXPECT_EQ(s.inactive_split_bytes[small].current, i64(2 * MiB - 512));
  EXPECT_EQ(addr(p) % 512, 0u);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_FALSE(segs[0].is_large);
  ASSERT_EQ(segs[0].blocks.size(), 2u);
  EXPECT_EQ(segs[0].blocks[0].size, 512u);
  EXPECT_EQ(segs[0].blocks[0].address, addr(p));
  env.alloc->deallocate(p);
}

TEST(alloc_free, MidSizeRequestGetsTwentyMiBSegmentAndRemainderStays) {
  native_env env;
  void* p = env.alloc->allocate(1 * MiB + MiB / 2);
  auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].total_size, 20 * MiB);
  EXPECT_TRUE(segs[0].is_large);
  ASSERT_EQ(segs[0].blocks.size(), 2u);
  EXPECT_EQ(segs[0].blocks[1].size, 20 * MiB - (1 * MiB + MiB / 2));
  EXPECT_EQ(segs[0].blocks[1].state, block_state::inactive);
  // The remainder serves the next large request without a new segment.
  const auto mallocs = env.calls(driver_call::malloc);
  void* q = env.alloc->allocate(2 * MiB);
  EXPECT_EQ(env.calls(driver_call::malloc), mallocs);
  EXPECT_EQ(addr(q), addr(p) + 1 * MiB + MiB / 2);
  env.alloc->deallocate(p);
  env.alloc->deallocate(q);
}

TEST(alloc_free, TenMiBPlusOneGetsTwelveMiBSegment) {
  native_env env;
  void* p = env.alloc->allocate(10 * MiB + 1);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].total_size, 12 * MiB);
  EXPECT_EQ(env.stats().allocated_bytes[large].current, i64(10 * MiB + 512));
  env.alloc->deallocate(p);
}

// docs/pytorch-compatibility.md §6 test_graph_memory_stats_and_use_result_after_destroy_graph: segment sizes.
TEST(alloc_free, SpecSegmentSizesPerRequest) {
  const std::size_t requests[] = {512, 1 * MiB, 1 * MiB + 512, 10 * MiB - 512, 10 * MiB + 512};
  const std::size_t expected[] = {2 * MiB, 2 * MiB, 20 * MiB, 20 * MiB, 12 * MiB};
  for (std::size_t i = 0; i < 5; ++i) {
    native_env env;
    void* p = env.alloc->allocate(requests[i]);
    const memory_stats s = env.stats();
    EXPECT_EQ(s.reserved_bytes[all].current, i64(expected[i])) << "request " << requests[i];
    EXPECT_EQ(s.segment[all].current, 1);
    EXPECT_EQ(s.active[all].current, 1);
    EXPECT_EQ(s.active_bytes[all].current, i64(env.segments()[0].blocks[0].size));
    env.alloc->deallocate(p);
  }
}

TEST(alloc_free, MergeOnFreeRestoresOneBlock) {
  native_env env;
  void* a = env.alloc->allocate(1000);
  void* b = env.alloc->allocate(1000);
  void* c = env.alloc->allocate(1000);
  EXPECT_EQ(env.segments()[0].blocks.size(), 4u);
  env.alloc->deallocate(b);  // middle: no free neighbour (a and c allocated)
  memory_stats s = env.stats();
  EXPECT_EQ(s.inactive_split[all].current, 2);
  EXPECT_EQ(env.segments()[0].blocks.size(), 4u);
  env.alloc->deallocate(a);  // merges with b
  s = env.stats();
  EXPECT_EQ(s.inactive_split[all].current, 2);
  EXPECT_EQ(env.segments()[0].blocks.size(), 3u);
  env.alloc->deallocate(c);  // merges with a+b and the tail: one block again
  const auto segs = env.segments();
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_EQ(segs[0].blocks[0].size, 2 * MiB);
  EXPECT_EQ(segs[0].blocks[0].state, block_state::inactive);
  s = env.stats();
  EXPECT_EQ(s.inactive_split[all].current, 0) << "an unsplit free segment is not inactive_split";
  EXPECT_EQ(s.inactive_split_bytes[all].current, 0);
  EXPECT_EQ(s.active[all].current, 0);
  EXPECT_EQ(s.allocated_bytes[all].current, 0);
  EXPECT_EQ(s.reserved_bytes[all].current, i64(2 * MiB)) << "free never returns memory";
}

TEST(alloc_free, BestFitSmallestThenLowestAddress) {
  native_env env;
  std::vector<void*> p;
  for (const std::size_t sz : {4096, 512, 2048, 512, 2048, 512}) p.push_back(env.alloc->allocate(sz));
  // Free 4096 (p0), 2048 (p2), 2048 (p4): three holes, not adjacent to each other.
  env.alloc->deallocate(p[0]);
  env.alloc->deallocate(p[2]);
  env.alloc->deallocate(p[4]);
  void* q = env.alloc->allocate(1500);  // rounds to 1536: best fit is a 2048 hole, the lower one
  EXPECT_EQ(q, p[2]);
  void* r = env.alloc->allocate(2048);
  EXPECT_EQ(r, p[4]);
  void* t = env.alloc->allocate(3000);
  EXPECT_EQ(t, p[0]);
  for (void* x : {p[1], p[3], p[5], q, r, t}) env.alloc->deallocate(x);
}

TEST(alloc_free, LargeRemainderOfOneMiBIsNotSplit) {
  native_env env;
  void* p = env.alloc->allocate(19 * MiB);  // 20 MiB segment, remainder exactly 1 MiB
  const auto segs = env.segments();
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_EQ(env.stats().allocated_bytes[all].current, i64(20 * MiB)) << "the whole block is allocated";
  EXPECT_EQ(env.stats().requested_bytes[all].current, i64(19 * MiB));
  env.alloc->deallocate(p);
}

TEST(alloc_free, MaxSplitSizeOversizeBlocksAreWholeSegments) {
  native_env env("max_split_size_mb:40");
  EXPECT_EQ(env.stats().max_split_size, i64(40 * MiB));
  void* big = env.alloc->allocate(50 * MiB);
  memory_stats s = env.stats();
  EXPECT_EQ(s.oversize_allocations.current, 1);
  EXPECT_EQ(s.oversize_segments.current, 1);
  ASSERT_EQ(env.segments()[0].blocks.size(), 1u);
  env.alloc->deallocate(big);
  // A normal request never takes the free oversize block.
  const auto mallocs = env.calls(driver_call::malloc);
  void* normal = env.alloc->allocate(30 * MiB);
  EXPECT_EQ(env.calls(driver_call::malloc), mallocs + 1);
  EXPECT_NE(normal, big);
  // An oversize request within max_non_split_rounding (20 MiB) reuses it whole.
  void* over = env.alloc->allocate(45 * MiB);
  EXPECT_EQ(over, big);
  EXPECT_EQ(env.calls(driver_call::malloc), mallocs + 1);
  s = env.stats();
  EXPECT_EQ(s.allocated_bytes[all].current, i64(50 * MiB + 30 * MiB));
  EXPECT_EQ(s.oversize_allocations.current, 1);
  env.alloc->deallocate(over);
  // A normal request again: the free 50 MiB block is oversize, so a new segment.
  void* far = env.alloc->allocate(25 * MiB);
  EXPECT_NE(far, big);
  env.alloc->deallocate(far);
  env.alloc->deallocate(normal);
}

TEST(alloc_free, MaxNonSplitRoundingIsConfigurable) {
  native_env env("max_split_size_mb:40,max_non_split_rounding_mb:60");
  void* big = env.alloc->allocate(100 * MiB);
  env.alloc->deallocate(big);
  void* q = env.alloc->allocate(45 * MiB);  // 100 < 45 + 60
  EXPECT_EQ(q, big);
  env.alloc->deallocate(q);
}

TEST(alloc_free, StatsFollowSpecSemantics) {
  native_env env;
  void* p = env.alloc->allocate(1024);  // docs/pytorch-compatibility.md §6 test_memory_stats: 256 floats
  memory_stats s = env.stats();
  EXPECT_EQ(s.active_bytes[all].current, 1024);
  EXPECT_EQ(s.active_bytes[all].freed, 0);
  EXPECT_EQ(s.allocation[all].allocated, 1);
  EXPECT_EQ(s.num_device_alloc, 1);
  env.alloc->deallocate(p);
  env.alloc->empty_cache();
  s = env.stats();
  EXPECT_EQ(s.active_bytes[all].freed, 1024);
  EXPECT_EQ(s.active_bytes[all].peak, 1024);
  EXPECT_EQ(s.allocated_bytes[all].peak, 1024);
  EXPECT_EQ(s.reserved_bytes[all].peak, i64(2 * MiB));
  EXPECT_EQ(s.reserved_bytes[all].current, 0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  env.alloc->reset_peak_stats();
  s = env.stats();
  EXPECT_EQ(s.allocated_bytes[all].peak, 0);
  EXPECT_EQ(s.reserved_bytes[all].peak, 0);
  EXPECT_EQ(s.allocation[all].allocated, 1) << "reset_peak keeps accumulated values";
  env.alloc->reset_accumulated_stats();
  s = env.stats();
  EXPECT_EQ(s.allocation[all].allocated, 0);
  EXPECT_EQ(s.active_bytes[all].freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.max_split_size, -1) << "unlimited, as PyTorch reports SIZE_MAX";
}

TEST(alloc_free, PeaksAreExactOnOneStream) {
  native_env env;
  void* a = env.alloc->allocate(3 * MiB);
  void* b = env.alloc->allocate(5 * MiB);
  env.alloc->deallocate(a);
  void* c = env.alloc->allocate(1 * MiB);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.allocated_bytes[all].peak, i64(8 * MiB));
  EXPECT_EQ(s.allocated_bytes[all].current, i64(6 * MiB));
  EXPECT_EQ(s.allocation[all].peak, 2);
  EXPECT_EQ(s.requested_bytes[large].peak, i64(8 * MiB));
  env.alloc->deallocate(b);
  env.alloc->deallocate(c);
}

TEST(alloc_free, PeakOfTwoStreamsGrowingTogether) {
  native_env env;
  const stream_t s1 = env.new_stream();
  const stream_t s2 = env.new_stream();
  void* a = env.alloc->allocate(4 * MiB, s1);
  void* b = env.alloc->allocate(6 * MiB, s2);
  env.alloc->deallocate(a);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.allocated_bytes[all].peak, i64(10 * MiB)) << "each stream passed its own high-water mark";
  EXPECT_EQ(s.allocated_bytes[all].current, i64(6 * MiB));
  EXPECT_EQ(s.allocated_bytes[large].peak, i64(10 * MiB));
  env.alloc->deallocate(b);
}

TEST(alloc_free, NoDriverCallOnCacheHit) {
  native_env env;
  void* warm = env.alloc->allocate(4096);
  void* warm_large = env.alloc->allocate(3 * MiB);
  env.alloc->deallocate(warm);
  env.alloc->deallocate(warm_large);
  env.sim->reset_counters();
  for (int i = 0; i < 1000; ++i) {
    void* p = env.alloc->allocate(static_cast<std::size_t>(100 + i * 7));
    void* q = env.alloc->allocate(3 * MiB);
    env.alloc->deallocate(p);
    env.alloc->deallocate(q);
  }
  for (std::size_t c = 0; c < driver_call_count; ++c) {
    const auto call = static_cast<driver_call>(c);
    EXPECT_EQ(env.calls(call), 0u) << to_string(call);
  }
}

}  // namespace
}  // namespace streampool::test

namespace streampool::test {
namespace {

// Active is allocation + frees still waiting for events (Note [Derived active counters]): its
// current, peak, allocated and freed must follow PyTorch's semantics while frees are pending,
// across reset_accumulated_stats and reset_peak_stats, per pool kind.
TEST(alloc_free, ActiveCountsPendingFreesThroughPeaksAndResets) {
  sim_options lazy;
  lazy.eager_completion = false;
  native_env env("", lazy);
  const stream_t side = env.new_stream();
  const stream_t main = env.new_stream();
  void* p = env.alloc->allocate(4096, side);
  env.alloc->record_stream(p, main);
  env.alloc->deallocate(p);  // pending: no longer allocated, still active
  memory_stats s = env.stats();
  EXPECT_EQ(s.allocation[all].current, 0);
  EXPECT_EQ(s.active[all].current, 1);
  EXPECT_EQ(s.active[small].current, 1);
  EXPECT_EQ(s.active[large].current, 0);
  EXPECT_EQ(s.active_bytes[small].current, 4096);
  EXPECT_EQ(s.active[all].allocated, 1);
  EXPECT_EQ(s.active[all].freed, 0);

  env.alloc->reset_accumulated_stats();  // while p is pending
  s = env.stats();
  EXPECT_EQ(s.active[all].current, 1);
  EXPECT_EQ(s.active[all].allocated, 0);
  EXPECT_EQ(s.active[all].freed, 0);

  void* q = env.alloc->allocate(8192, side);  // p is not reusable yet: a second active block
  EXPECT_NE(q, p);
  s = env.stats();
  EXPECT_EQ(s.allocation[all].peak, 1) << "never two allocated at once";
  EXPECT_EQ(s.active[all].peak, 2) << "p (pending) and q are both active";
  EXPECT_EQ(s.active_bytes[all].peak, 4096 + 8192);
  EXPECT_EQ(s.allocated_bytes[all].peak, 8192);
  EXPECT_EQ(s.active[all].allocated, 1);

  void* big = env.alloc->allocate(4 * MiB, side);
  env.alloc->record_stream(big, main);
  env.alloc->deallocate(big);  // a pending large block
  env.alloc->reset_peak_stats();
  s = env.stats();
  EXPECT_EQ(s.active_bytes[large].current, i64(4 * MiB));
  EXPECT_EQ(s.active_bytes[large].peak, i64(4 * MiB)) << "reset to the current value, pending included";
  EXPECT_EQ(s.allocated_bytes[large].peak, 0);
  EXPECT_EQ(s.active[all].peak, 3);

  env.sim->complete(main);
  void* r = env.alloc->allocate(4096, side);  // polls the events: p and big complete
  EXPECT_EQ(r, p);
  s = env.stats();
  EXPECT_EQ(s.active[all].current, 2) << "q and r";
  EXPECT_EQ(s.active[large].current, 0);
  EXPECT_EQ(s.active_bytes[large].current, 0);
  EXPECT_EQ(s.active[all].allocated, 3) << "q, big and r since the reset";
  EXPECT_EQ(s.active[all].freed, 2) << "p and big completed since the reset";
  EXPECT_EQ(s.active_bytes[all].freed, i64(4096 + 4 * MiB));
  EXPECT_EQ(s.active[all].peak, 3);

  env.alloc->deallocate(q);
  env.alloc->deallocate(r);
  s = env.stats();
  EXPECT_EQ(s.active[all].current, 0);
  EXPECT_EQ(s.active_bytes[all].current, 0);
  EXPECT_EQ(s.active[all].freed, 4);
  EXPECT_EQ(s.allocation[all].freed, 3) << "big, q and r since the reset (p's free request came before it)";
}

}  // namespace
}  // namespace streampool::test
