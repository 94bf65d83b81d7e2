// async_pool_setup_test.cpp — the cudaMallocAsync backend's pool set-up (Note [Pool setup]): lazy,
// default or dedicated pool, release threshold UINT64_MAX and reuse policies on, clear errors for
// devices without pools or machines without devices, and empty_cache = synchronise + trim.
#include <limits>

#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

using async_pool_setup = async_fixture;

TEST_F(async_pool_setup, NothingIsSetUpBeforeFirstUse) {
  EXPECT_EQ(sim_->calls(driver_call::pool_get_default), 0u);
  EXPECT_EQ(sim_->calls(driver_call::pool_set_attr), 0u);
  EXPECT_EQ(backend().initialized_device(0), nullptr);
  // Statistics of an unused device are zeros and do not set it up.
  EXPECT_EQ(alloc_->stats(0).allocated_bytes[0].current, 0);
  EXPECT_EQ(sim_->calls(driver_call::pool_get_default), 0u);
  EXPECT_EQ(alloc_->backend_name(), "cudaMallocAsync");
}

TEST_F(async_pool_setup, DefaultPoolKeepsEverythingAndReuses) {
  void* p = alloc_->allocate(1000);
  mempool_t default_pool = nullptr;
  ASSERT_TRUE(sim_->pool_get_default(0, &default_pool).ok());
  EXPECT_EQ(pool_of(0), default_pool);
  EXPECT_EQ(sim_->calls(driver_call::pool_create), 0u);
  EXPECT_EQ(pool_attr_value(default_pool, pool_attr::release_threshold), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(pool_attr_value(default_pool, pool_attr::reuse_follow_event_dependencies), 1u);
  EXPECT_EQ(pool_attr_value(default_pool, pool_attr::reuse_allow_opportunistic), 1u);
  EXPECT_EQ(pool_attr_value(default_pool, pool_attr::reuse_allow_internal_dependencies), 1u);
  alloc_->deallocate(p);
  // Freed memory stays reserved across a synchronisation (threshold UINT64_MAX).
  ASSERT_TRUE(sim_->device_synchronize(0).ok());
  EXPECT_GT(sim_->bytes_in_use(0), 0u);
}

TEST_F(async_pool_setup, SetupHappensOnce) {
  alloc_->deallocate(alloc_->allocate(100));
  alloc_->deallocate(alloc_->allocate(200));
  EXPECT_EQ(sim_->calls(driver_call::pool_get_default), 1u);
  EXPECT_EQ(sim_->calls(driver_call::pool_set_attr), 4u);  // threshold + three reuse policies
}

TEST_F(async_pool_setup, DedicatedPoolIsCreatedAndDestroyed) {
  make({}, "async_pool:dedicated");
  void* p = alloc_->allocate(4096);
  EXPECT_EQ(sim_->calls(driver_call::pool_create), 1u);
  EXPECT_EQ(sim_->calls(driver_call::pool_get_default), 0u);
  mempool_t default_pool = nullptr;
  ASSERT_TRUE(sim_->pool_get_default(0, &default_pool).ok());
  const mempool_t pool = pool_of(0);
  EXPECT_NE(pool, default_pool);
  EXPECT_EQ(pool_attr_value(pool, pool_attr::release_threshold), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(pool_attr_value(pool, pool_attr::used_mem_current), 4096u);
  EXPECT_EQ(pool_attr_value(default_pool, pool_attr::used_mem_current), 0u);  // default pool untouched
  alloc_->deallocate(p);
  alloc_.reset();
  EXPECT_EQ(sim_->calls(driver_call::pool_destroy), 1u);
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);  // a destroyed pool's idle memory goes back
}

TEST_F(async_pool_setup, DeviceWithoutPoolsFailsClearlyAtFirstUse) {
  sim_options options;
  options.memory_pools_supported = false;
  make(options);  // construction must succeed
  try {
    (void)alloc_->allocate(512);
    FAIL() << "expected streampool::error";
  } catch (const out_of_memory&) {
    FAIL() << "a missing feature is not an out-of-memory condition";
  } catch (const error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("memory pools"), std::string::npos) << message;
    EXPECT_NE(message.find("device 0"), std::string::npos) << message;
    EXPECT_NE(message.find("backend:native"), std::string::npos) << message;
  }
  EXPECT_THROW((void)alloc_->allocate(512), error);  // and again, not a half set-up device
  EXPECT_EQ(backend().initialized_device(0), nullptr);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 0u);
}

TEST_F(async_pool_setup, MachineWithoutDeviceBuildsAndReportsAtFirstUse) {
  sim_options options;
  options.device_count = 0;
  make(options);
  ASSERT_NE(alloc_, nullptr);
  EXPECT_THROW((void)alloc_->allocate(512, nullptr, 0), error);
  EXPECT_NO_THROW(alloc_->empty_cache());
  EXPECT_TRUE(alloc_->snapshot().segments.empty());
}

TEST_F(async_pool_setup, EmptyCacheSynchronisesAndTrims) {
  void* keep = alloc_->allocate(mib);
  void* big = alloc_->allocate(64 * mib);
  alloc_->deallocate(big);
  const std::size_t before = sim_->bytes_in_use(0);
  EXPECT_GE(before, 65 * mib);  // the freed 64 MiB is still cached by the pool
  const auto syncs = sim_->calls(driver_call::device_synchronize);
  alloc_->empty_cache();
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), syncs + 1);
  EXPECT_EQ(sim_->calls(driver_call::pool_trim_to), 1u);
  const std::size_t after = sim_->bytes_in_use(0);
  EXPECT_LT(after, before);
  EXPECT_GE(after, mib);  // the live allocation's memory stays
  const memory_stats stats = alloc_->stats(0);
  EXPECT_EQ(stats.num_sync_all_streams, 1);
  EXPECT_EQ(stats.reserved_bytes[0].current, static_cast<std::int64_t>(after));
  alloc_->deallocate(keep);
  alloc_->empty_cache();
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);
  EXPECT_EQ(alloc_->stats(0).reserved_bytes[0].current, 0);
}

TEST_F(async_pool_setup, EmptyCacheSkipsUnusedDevices) {
  sim_options options;
  options.device_count = 2;
  make(options);
  alloc_->deallocate(alloc_->allocate(100, nullptr, 1));
  alloc_->empty_cache();
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 1u);  // device 1 only
  EXPECT_EQ(backend().initialized_device(0), nullptr);
}

}  // namespace
}  // namespace streampool::testing
