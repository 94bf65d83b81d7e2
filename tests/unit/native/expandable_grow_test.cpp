// Expandable segments, growth (docs/pytorch-compatibility.md §2.13): one reservation per (stream, pool kind), only the
// rounded request is mapped in whole pages, growth in place merges with the free block before
// it, lowest-address fill, the expandable best-fit rule (docs/pytorch-compatibility.md §2.6), exact statistics and the
// snapshot's one-segment-per-mapped-range, and no driver call on a cache hit.
#include <gtest/gtest.h>

#include "unit/native/expandable_test_support.hpp"

namespace streampool::test {
namespace {

TEST(expandable_grow, MapsOnlyTheRoundedRequestInWholePages) {
  expandable_env env;
  env.alloc->record_history(true);
  void* a = env.alloc->allocate(30 * MiB);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u);
  EXPECT_EQ(env.calls(driver_call::vmm_create), 2u) << "30 MiB = two 20 MiB pages, one handle each";
  EXPECT_EQ(env.calls(driver_call::vmm_map), 2u);
  EXPECT_EQ(env.calls(driver_call::vmm_set_access), 1u);
  EXPECT_EQ(env.calls(driver_call::malloc), 0u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 40 * MiB);
  memory_stats s = env.stats();
  EXPECT_EQ(s.reserved_bytes[large].current, i64(40 * MiB));
  EXPECT_EQ(s.num_device_alloc, 1) << "one map operation";

  void* b = env.alloc->allocate(5 * MiB);  // fits in the 10 MiB left in the mapped pages
  EXPECT_EQ(addr(b), addr(a) + 30 * MiB);
  EXPECT_EQ(env.calls(driver_call::vmm_create), 2u);

  void* c = env.alloc->allocate(10 * MiB);  // 5 MiB free before the unmapped rest + one new page
  EXPECT_EQ(addr(c), addr(a) + 35 * MiB) << "grown in place, contiguous with the free block before it";
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u);
  EXPECT_EQ(env.calls(driver_call::vmm_create), 3u);
  s = env.stats();
  EXPECT_EQ(s.reserved_bytes[all].current, i64(60 * MiB));
  EXPECT_EQ(s.num_device_alloc, 2);

  void* d = env.alloc->allocate(512);  // small pool: its own reservation, 2 MiB pages
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 2u);
  EXPECT_EQ(env.stats().reserved_bytes[small].current, i64(small_page));
  const auto maps = env.entries(trace_action::segment_map);
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0].address, addr(a));
  EXPECT_EQ(maps[0].size, 40 * MiB);
  EXPECT_EQ(maps[1].address, addr(a) + 40 * MiB);
  EXPECT_EQ(maps[1].size, 20 * MiB);
  EXPECT_EQ(maps[2].size, small_page);
  EXPECT_TRUE(env.entries(trace_action::segment_alloc).empty());
  expect_consistent(env);
  for (void* p : {a, b, c, d}) env.alloc->deallocate(p);
  expect_consistent(env);
}

TEST(expandable_grow, LowestAddressFillUsesEarlierHolesFirst) {
  expandable_env env;
  std::vector<void*> p;
  for (int i = 0; i < 4; ++i) p.push_back(env.alloc->allocate(large_page));
  for (int i = 1; i < 4; ++i) ASSERT_EQ(addr(p[i]), addr(p[0]) + i * large_page);
  const std::uintptr_t base = addr(p[0]);
  env.alloc->deallocate(p[0]);
  env.alloc->deallocate(p[2]);
  env.alloc->empty_cache();  // holes at pages 0 and 2
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  void* too_big = env.alloc->allocate(2 * large_page);  // no hole fits: the run after page 3
  EXPECT_EQ(addr(too_big), base + 4 * large_page);
  void* first = env.alloc->allocate(large_page);
  EXPECT_EQ(addr(first), base) << "the lowest hole";
  void* second = env.alloc->allocate(large_page);
  EXPECT_EQ(addr(second), base + 2 * large_page);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u);
  expect_consistent(env);
  for (void* q : {too_big, first, second, p[1], p[3]}) env.alloc->deallocate(q);
}

TEST(expandable_grow, OneGrowthMapsEveryHoleOfTheRunItUses) {
  expandable_env env;
  void* l1 = env.alloc->allocate(10 * MiB);
  void* x = env.alloc->allocate(10 * MiB);  // page 0 full
  void* h = env.alloc->allocate(large_page);
  void* y = env.alloc->allocate(large_page);  // pages 1 and 2
  env.alloc->deallocate(h);
  env.alloc->deallocate(x);  // free [10, 40) MiB
  env.alloc->empty_cache();  // page 1 unmapped; [10, 20) stays mapped (page 0 holds l1)
  env.alloc->deallocate(y);  // free page 2, right before the unmapped rest
  ASSERT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  env.alloc->record_history(true);
  const auto maps_before = env.stats().num_device_alloc;
  // free 10 MiB + hole (page 1) + free page 2 + one more page of the unmapped rest = 70 MiB >= 60.
  void* p = env.alloc->allocate(60 * MiB);
  EXPECT_EQ(addr(p), addr(l1) + 10 * MiB);
  EXPECT_EQ(env.stats().num_device_alloc - maps_before, 2) << "the hole, then the page after page 2";
  const auto maps = env.entries(trace_action::segment_map);
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].address, addr(l1) + large_page);
  EXPECT_EQ(maps[1].address, addr(l1) + 3 * large_page);
  EXPECT_EQ(env.sim->bytes_in_use(0), 4 * large_page);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 3u);
  EXPECT_EQ(segs[0].blocks[2].size, 10 * MiB) << "the rest of the last page stays free";
  expect_consistent(env);
  env.alloc->deallocate(p);
  env.alloc->deallocate(l1);
}

TEST(expandable_grow, BestFitTakesTheGrowthFrontierLast) {
  expandable_env env;
  void* x = env.alloc->allocate(16 * MiB);
  void* y = env.alloc->allocate(4 * MiB);  // page 0 full
  void* z = env.alloc->allocate(25 * MiB); // pages 1-2; free frontier block of 15 MiB after it
  ASSERT_EQ(addr(z), addr(x) + 20 * MiB);
  env.alloc->deallocate(x);                // a 16 MiB free block that cannot grow
  void* p = env.alloc->allocate(12 * MiB);
  EXPECT_EQ(p, x) << "the 15 MiB frontier fits better by size but reaches to the end of the reservation";
  void* q = env.alloc->allocate(12 * MiB);
  EXPECT_EQ(addr(q), addr(z) + 25 * MiB) << "only the frontier is left";
  EXPECT_EQ(env.stats().num_device_alloc, 2) << "no growth needed for either";
  for (void* r : {p, q, y, z}) env.alloc->deallocate(r);
}

TEST(expandable_grow, SmallPoolBlocksMergeAcrossPages) {
  expandable_env env;
  void* a = env.alloc->allocate(1 * MiB);
  void* b = env.alloc->allocate(1 * MiB);
  void* c = env.alloc->allocate(1 * MiB);  // a second 2 MiB page, right after the first
  EXPECT_EQ(addr(b), addr(a) + 1 * MiB);
  EXPECT_EQ(addr(c), addr(a) + 2 * MiB);
  for (void* p : {a, b, c}) env.alloc->deallocate(p);
  auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 1u) << "one free block of 4 MiB (larger than any small bin)";
  EXPECT_EQ(segs[0].blocks[0].size, 4 * MiB);
  EXPECT_FALSE(segs[0].is_large);
  const auto maps = env.stats().num_device_alloc;
  void* d = env.alloc->allocate(512);
  EXPECT_EQ(d, a) << "found in the small pool's overflow list";
  EXPECT_EQ(env.stats().num_device_alloc, maps);
  segs = env.segments();
  ASSERT_EQ(segs[0].blocks.size(), 2u) << "split: remaining >= 512 splits";
  EXPECT_EQ(segs[0].blocks[1].size, 4 * MiB - 512);
  env.alloc->deallocate(d);
  expect_consistent(env);
}

TEST(expandable_grow, LargePoolSplitsDownTo512Bytes) {
  expandable_env env;
  void* a = env.alloc->allocate(20 * MiB - 512);  // remaining 512 B: split (normal segments: not)
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 2u);
  EXPECT_EQ(segs[0].blocks[1].size, 512u);
  EXPECT_EQ(env.stats().inactive_split[all].current, 0) << "inactive_split ignores expandable blocks";
  env.alloc->deallocate(a);
}

TEST(expandable_grow, SnapshotHasOneSegmentPerMappedRange) {
  expandable_env env;
  std::vector<void*> p;
  for (int i = 0; i < 5; ++i) p.push_back(env.alloc->allocate(large_page));
  env.alloc->deallocate(p[1]);
  env.alloc->deallocate(p[3]);
  env.alloc->empty_cache();  // mapped: page 0, page 2, page 4
  auto segs = env.segments();
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[1].address, addr(p[2]));
  EXPECT_EQ(segs[1].total_size, large_page);
  void* q = env.alloc->allocate(3 * MiB);  // maps the hole at page 1
  EXPECT_EQ(addr(q), addr(p[1]));
  segs = env.segments();
  ASSERT_EQ(segs.size(), 2u) << "pages 0-2 are one mapped range again";
  EXPECT_EQ(segs[0].address, addr(p[0]));
  EXPECT_EQ(segs[0].total_size, 3 * large_page);
  ASSERT_EQ(segs[0].blocks.size(), 4u);
  EXPECT_EQ(segs[0].blocks[1].address, addr(q));
  EXPECT_EQ(segs[0].blocks[2].state, block_state::inactive);
  EXPECT_EQ(segs[0].blocks[2].size, large_page - 3 * MiB);
  EXPECT_EQ(segs[1].address, addr(p[4]));
  for (const segment_info& s : segs) {
    EXPECT_TRUE(s.is_expandable);
    EXPECT_TRUE(s.is_large);
  }
  const std::string json = env.alloc->snapshot().to_json();
  EXPECT_NE(json.find("\"is_expandable\":true"), std::string::npos);
  expect_consistent(env);
  for (void* r : {p[0], p[2], p[4], q}) env.alloc->deallocate(r);
}

TEST(expandable_grow, CacheHitMakesNoDriverCall) {
  expandable_env env;
  for (std::size_t size : {std::size_t{512}, 1 * MiB, 3 * MiB, 64 * MiB}) {
    env.alloc->deallocate(env.alloc->allocate(size));
  }
  env.sim->reset_counters();
  for (int i = 0; i < 1000; ++i) {
    for (std::size_t size : {std::size_t{512}, 1 * MiB, 3 * MiB, 64 * MiB}) {
      env.alloc->deallocate(env.alloc->allocate(size));
    }
  }
  for (std::size_t c = 0; c < driver_call_count; ++c) {
    EXPECT_EQ(env.sim->calls(static_cast<driver_call>(c)), 0u) << to_string(static_cast<driver_call>(c));
  }
}

TEST(expandable_grow, OneReservationPerStreamAndPoolKind) {
  expandable_env env;
  const stream_t s1 = env.new_stream();
  const stream_t s2 = env.new_stream();
  void* a = env.alloc->allocate(large_page, s1);
  env.alloc->deallocate(a);
  void* b = env.alloc->allocate(large_page, s2);
  EXPECT_NE(b, a) << "a free block of stream 1 is never used by stream 2";
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 2u);
  const std::uintptr_t distance = addr(b) > addr(a) ? addr(b) - addr(a) : addr(a) - addr(b);
  EXPECT_GE(distance, 90 * GiB) << "separate reservations of 9/8 x 80 GiB";
  void* c = env.alloc->allocate(large_page, s1);
  EXPECT_EQ(c, a);
  void* d = env.alloc->allocate(4096, s1);
  void* e = env.alloc->allocate(4096, s2);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 4u);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 4u);
  for (void* p : {b, c, d, e}) env.alloc->deallocate(p);
  expect_consistent(env);
}

TEST(expandable_grow, PagesFollowTheDeviceGranularity) {
  sim_options o = sim_with(1 * GiB);
  o.vmm_granularity = 8 * MiB;  // pages: 2 MiB -> 8 MiB, 20 MiB -> 24 MiB
  native_env env("expandable_segments:True", o);
  void* a = env.alloc->allocate(512);
  void* b = env.alloc->allocate(21 * MiB);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.reserved_bytes[small].current, i64(8 * MiB));
  EXPECT_EQ(s.reserved_bytes[large].current, i64(24 * MiB));
  EXPECT_EQ(addr(b) % (8 * MiB), 0u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 32 * MiB);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(expandable_grow, ReservationSizeFollowsTheConfig) {
  expandable_env env(8 * GiB, "expandable_segments_reserve:0.5");
  void* a = env.alloc->allocate(MiB * 3);
  void* b = env.alloc->allocate(5 * GiB);  // larger than the 4 GiB reservation: a second one
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 2u);
  EXPECT_GE(addr(b), addr(a) + 4 * GiB);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
  expect_consistent(env);
}

}  // namespace
}  // namespace streampool::test
