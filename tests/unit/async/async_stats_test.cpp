// async_stats_test.cpp — exact statistics of the cudaMallocAsync backend (Note [Statistics of the
// cudaMallocAsync backend]): counts and footprints from its own accounting, small/large split by
// requested size, reserved bytes from the pool, peaks and both resets.
#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

using async_stats = async_fixture;

constexpr std::int64_t small_request = 100;
constexpr std::int64_t large_request = 2 * mib + 1;
constexpr std::int64_t small_footprint = 512;
constexpr std::int64_t large_footprint = 2 * mib + 512;

TEST_F(async_stats, AllocationsAreCountedExactly) {
  void* small = alloc_->allocate(small_request);
  void* large = alloc_->allocate(large_request);
  auto m = stats_map();
  EXPECT_EQ(m["allocation.all.current"], 2);
  EXPECT_EQ(m["allocation.small_pool.current"], 1);
  EXPECT_EQ(m["allocation.large_pool.current"], 1);
  EXPECT_EQ(m["active.all.current"], 2);
  EXPECT_EQ(m["segment.all.current"], 2);
  EXPECT_EQ(m["allocated_bytes.all.current"], small_footprint + large_footprint);
  EXPECT_EQ(m["allocated_bytes.small_pool.current"], small_footprint);
  EXPECT_EQ(m["allocated_bytes.large_pool.current"], large_footprint);
  EXPECT_EQ(m["active_bytes.all.current"], small_footprint + large_footprint);
  EXPECT_EQ(m["requested_bytes.all.current"], small_request + large_request);
  EXPECT_EQ(m["requested_bytes.large_pool.current"], large_request);
  EXPECT_EQ(m["num_device_alloc"], 2);
  EXPECT_EQ(m["num_device_free"], 0);
  EXPECT_EQ(m["inactive_split.all.current"], 0);
  EXPECT_EQ(m["oversize_allocations.current"], 0);
  EXPECT_EQ(m["max_split_size"], 0);
  // The pool's own figure of used bytes is the exact requests.
  EXPECT_EQ(static_cast<std::int64_t>(pool_attr_value(pool_of(0), pool_attr::used_mem_current)),
            m["requested_bytes.all.current"]);

  alloc_->deallocate(small);
  m = stats_map();
  EXPECT_EQ(m["allocation.all.current"], 1);
  EXPECT_EQ(m["allocation.all.peak"], 2);
  EXPECT_EQ(m["allocation.all.allocated"], 2);
  EXPECT_EQ(m["allocation.all.freed"], 1);
  EXPECT_EQ(m["allocated_bytes.small_pool.current"], 0);
  EXPECT_EQ(m["allocated_bytes.small_pool.peak"], small_footprint);
  EXPECT_EQ(m["allocated_bytes.small_pool.freed"], small_footprint);
  EXPECT_EQ(m["active.small_pool.current"], 0);
  EXPECT_EQ(m["segment.all.current"], 1);
  EXPECT_EQ(m["requested_bytes.all.freed"], small_request);
  EXPECT_EQ(m["num_device_free"], 1);
  alloc_->deallocate(large);
  m = stats_map();
  EXPECT_EQ(m["allocated_bytes.all.current"], 0);
  EXPECT_EQ(m["allocated_bytes.all.peak"], small_footprint + large_footprint);
  EXPECT_EQ(m["num_device_free"], 2);
}

TEST_F(async_stats, ReservedBytesComeFromThePool) {
  void* p = alloc_->allocate(64 * mib);
  const mempool_t pool = pool_of(0);
  memory_stats s = alloc_->stats(0);
  const auto reserved = static_cast<std::int64_t>(pool_attr_value(pool, pool_attr::reserved_mem_current));
  EXPECT_GE(reserved, 64 * static_cast<std::int64_t>(mib));
  EXPECT_EQ(s.reserved_bytes[0].current, reserved);
  EXPECT_EQ(s.reserved_bytes[2].current, reserved);  // all of it counts as large_pool
  EXPECT_EQ(s.reserved_bytes[1].current, 0);
  EXPECT_EQ(s.reserved_bytes[0].allocated, reserved);
  alloc_->deallocate(p);
  alloc_->empty_cache();
  s = alloc_->stats(0);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.reserved_bytes[0].peak, reserved);
  EXPECT_EQ(s.reserved_bytes[0].freed, reserved);
}

TEST_F(async_stats, PeakBetweenReadingsIsNotLost) {
  alloc_->deallocate(alloc_->allocate(128 * mib));
  // The reserve shrinks again (someone else trims the pool) before the stats are read.
  ASSERT_TRUE(sim_->pool_trim_to(pool_of(0), 0).ok());
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_GE(s.reserved_bytes[0].peak, 128 * static_cast<std::int64_t>(mib));  // from ReservedMemHigh
}

TEST_F(async_stats, ResetPeakResetsOurPeaksAndThePools) {
  void* a = alloc_->allocate(64 * mib);
  void* b = alloc_->allocate(mib);
  alloc_->deallocate(a);
  alloc_->empty_cache();
  const mempool_t pool = pool_of(0);
  EXPECT_GT(pool_attr_value(pool, pool_attr::reserved_mem_high),
            pool_attr_value(pool, pool_attr::reserved_mem_current));
  alloc_->reset_peak_stats(0);
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<std::int64_t>(mib));
  EXPECT_EQ(s.allocation[0].peak, 1);
  EXPECT_EQ(s.reserved_bytes[0].peak, s.reserved_bytes[0].current);
  EXPECT_EQ(pool_attr_value(pool, pool_attr::reserved_mem_high),
            pool_attr_value(pool, pool_attr::reserved_mem_current));
  EXPECT_EQ(pool_attr_value(pool, pool_attr::used_mem_high), pool_attr_value(pool, pool_attr::used_mem_current));
  EXPECT_EQ(s.allocation[0].allocated, 2);  // accumulated counters untouched
  alloc_->deallocate(b);
}

TEST_F(async_stats, ResetAccumulatedKeepsCurrentValues) {
  void* a = alloc_->allocate(1000);
  alloc_->deallocate(alloc_->allocate(2000));
  alloc_->empty_cache();
  alloc_->reset_accumulated_stats(0);
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.allocation[0].current, 1);
  EXPECT_EQ(s.allocation[0].allocated, 0);
  EXPECT_EQ(s.allocation[0].freed, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, 1024);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.num_device_free, 0);
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.allocation[0].peak, 2);  // peaks untouched
  alloc_->deallocate(a);
  EXPECT_EQ(alloc_->stats(0).allocation[0].freed, 1);
}

TEST_F(async_stats, ToJsonHasPyTorchKeys) {
  alloc_->deallocate(alloc_->allocate(512));
  const std::string json = alloc_->stats(0).to_json();
  EXPECT_NE(json.find("\"allocated_bytes.all.peak\":512"), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_device_alloc\":1"), std::string::npos) << json;
}

}  // namespace
}  // namespace streampool::testing
