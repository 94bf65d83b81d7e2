// host_allocator_test.cpp — the pinned host allocator's basic behaviour on the sim driver:
// power-of-two rounding, reuse of a freed block of the same size class with no driver call,
// statistics with PyTorch's host stat names, empty_cache, the snapshot, and make_host_allocator.
#include <cstring>

#include "host_test_support.hpp"

namespace streampool::test {
namespace {

TEST(host_allocator, SizesRoundUpToAPowerOfTwoAndTheMemoryIsWritable) {
  host_env env;
  void* ptr = env.alloc->allocate(3000);
  std::memset(ptr, 0x5a, 3000);
  const host_snapshot snap = env.alloc->snapshot();
  ASSERT_EQ(snap.blocks.size(), 1u);
  EXPECT_EQ(snap.blocks[0].size, 4096u);
  EXPECT_EQ(snap.blocks[0].requested_size, 3000u);
  EXPECT_EQ(snap.blocks[0].state, host_block_state::in_use);
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_EQ(snap.segments[0].size, 4096u);
  EXPECT_FALSE(snap.segments[0].registered);
  EXPECT_EQ(env.sim->host_bytes_pinned(), 4096u);
  env.alloc->deallocate(ptr);
}

TEST(host_allocator, AFreedBlockIsReusedForTheSameSizeClassWithoutADriverCall) {
  host_env env;
  void* a = env.alloc->allocate(5000);
  env.alloc->deallocate(a);
  env.sim->reset_counters();
  void* b = env.alloc->allocate(8192);  // same class: 8 KiB
  EXPECT_EQ(b, a);
  EXPECT_EQ(env.sim->calls(driver_call::host_alloc), 0u);
  void* c = env.alloc->allocate(8193);  // next class
  EXPECT_NE(c, a);
  EXPECT_EQ(env.sim->calls(driver_call::host_alloc), 1u);
  env.alloc->deallocate(b);
  env.alloc->deallocate(c);
}

TEST(host_allocator, StatsUseTorchHostMemoryStatsNames) {
  host_env env;
  void* a = env.alloc->allocate(100);   // 128
  void* b = env.alloc->allocate(1000);  // 1024
  host_memory_stats s = env.alloc->stats();
  EXPECT_EQ(s.allocation.current, 2);
  EXPECT_EQ(s.allocated_bytes.current, 1152);
  EXPECT_EQ(s.segment.current, 2);
  EXPECT_EQ(s.reserved_bytes.current, 1152);
  EXPECT_EQ(s.num_host_alloc, 2);
  EXPECT_EQ(s.host_alloc_time.count, 2);
  env.alloc->deallocate(a);
  s = env.alloc->stats();
  EXPECT_EQ(s.allocation.current, 1);
  EXPECT_EQ(s.allocation.peak, 2);
  EXPECT_EQ(s.allocation.freed, 1);
  EXPECT_EQ(s.reserved_bytes.current, 1152);  // cached, still held
  env.alloc->deallocate(b);
  env.alloc->empty_cache();
  s = env.alloc->stats();
  EXPECT_EQ(s.segment.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.num_host_free, 2);
  EXPECT_EQ(s.host_free_time.count, 2);
  EXPECT_EQ(env.sim->host_bytes_pinned(), 0u);

  const auto map = s.to_map();
  for (const char* key :
       {"allocation.current", "allocation.peak", "allocation.allocated", "allocation.freed",
        "allocated_bytes.current", "segment.peak", "reserved_bytes.freed", "num_host_alloc", "num_host_free",
        "host_alloc_time.total", "host_alloc_time.max", "host_alloc_time.min", "host_alloc_time.count",
        "host_alloc_time.avg", "host_free_time.avg"}) {
    EXPECT_EQ(map.count(key), 1u) << key;
  }
  EXPECT_EQ(map.size(), 4u * 4u + 2u * 5u + 2u);
  EXPECT_EQ(map.at("reserved_bytes.peak"), 1152);
  EXPECT_NE(s.to_json().find("\"num_host_alloc\":2"), std::string::npos);
}

TEST(host_allocator, ResetPeakAndAccumulated) {
  host_env env;
  void* a = env.alloc->allocate(64);
  void* b = env.alloc->allocate(64);
  env.alloc->deallocate(a);
  env.alloc->reset_peak_stats();
  host_memory_stats s = env.alloc->stats();
  EXPECT_EQ(s.allocation.peak, 1);
  EXPECT_EQ(s.host_alloc_time.max, 0);
  env.alloc->reset_accumulated_stats();
  s = env.alloc->stats();
  EXPECT_EQ(s.allocation.allocated, 0);
  EXPECT_EQ(s.allocation.freed, 0);
  EXPECT_EQ(s.num_host_alloc, 0);
  EXPECT_EQ(s.host_alloc_time.count, 0);
  EXPECT_EQ(s.allocation.current, 1);
  env.alloc->deallocate(b);
}

TEST(host_allocator, EmptyCacheKeepsBlocksInUse) {
  host_env env;
  void* kept = env.alloc->allocate(4096);
  void* cached = env.alloc->allocate(2048);
  env.alloc->deallocate(cached);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->live_host_allocs(), 1u);
  EXPECT_TRUE(env.alloc->owns(kept));
  EXPECT_FALSE(env.alloc->owns(cached));
  std::memset(kept, 1, 4096);
  env.alloc->deallocate(kept);
}

TEST(host_allocator, SnapshotJsonHasSegmentsBlocksStatsAndSettings) {
  host_env env("pinned_num_register_threads:4");
  void* a = env.alloc->allocate(256);
  void* b = env.alloc->allocate(512);
  env.alloc->deallocate(b);
  const host_snapshot snap = env.alloc->snapshot();
  ASSERT_EQ(snap.blocks.size(), 2u);
  EXPECT_LT(snap.blocks[0].address, snap.blocks[1].address);
  int in_use = 0;
  int cached = 0;
  for (const host_block_info& block : snap.blocks) {
    in_use += block.state == host_block_state::in_use;
    cached += block.state == host_block_state::cached;
  }
  EXPECT_EQ(in_use, 1);
  EXPECT_EQ(cached, 1);
  EXPECT_EQ(snap.stats.allocation.current, 1);
  const std::string json = snap.to_json();
  for (const char* part : {"\"allocator_settings\":\"pinned_use_cuda_host_register:False,pinned_num_register_threads:4",
                           "\"segments\":[{", "\"blocks\":[{", "\"state\":\"cached\"", "\"state\":\"in_use\"",
                           "\"stats\":{\"allocated_bytes.allocated\":768"}) {
    EXPECT_NE(json.find(part), std::string::npos) << part << "\n" << json;
  }
  env.alloc->deallocate(a);
}

TEST(host_allocator, MakeHostAllocatorRefusesANullDriver) {
  EXPECT_THROW((void)make_host_allocator(allocator_config{}, nullptr), error);
}

TEST(host_allocator, DestructionGivesEverythingBack) {
  auto sim = std::make_shared<sim_driver>();
  {
    auto alloc = make_host_allocator(parse_config("pinned_reserve_segment_size_mb:1"), sim);
    (void)alloc->allocate(100);                     // in use, from the reserve
    alloc->deallocate(alloc->allocate(4 * mib));    // cached, its own range
    (void)alloc->allocate(2 * mib);                 // in use, its own range
    EXPECT_EQ(sim->live_host_allocs(), 3u);
  }
  EXPECT_EQ(sim->live_host_allocs(), 0u);
  EXPECT_EQ(sim->host_bytes_pinned(), 0u);
}

}  // namespace
}  // namespace streampool::test
