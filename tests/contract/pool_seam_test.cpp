// pool_seam_test.cpp — the per-device pool object (allocator::pools, Note [Pool seam] in
// src/core/device_pools.cpp) on every backend and driver, and through checking mode: one object
// per device, reached the same way as the allocator's own pool calls, with the same checks.
#include <string>

#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

class pool_seam_test : public backend_test {};

TEST_P(pool_seam_test, OneObjectPerDeviceThatTheAllocatorsPoolCallsGoThrough) {
  device_pools& pools = alloc_->pools(0);
  EXPECT_EQ(pools.device(), 0);
  EXPECT_EQ(&alloc_->pools(0), &pools) << "the same object every time";
  const stream_t s = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  pools.begin_allocate_to_pool(pool, [s](stream_t x) { return x == s; });
  void* p = alloc_->allocate(4096, s);  // routed to the pool begun through the object
  bool in_pool = false;
  for (const segment_info& seg : alloc_->snapshot().segments) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (a >= seg.address && a < seg.address + seg.total_size) in_pool = seg.pool == pool;
  }
  EXPECT_TRUE(in_pool);
  alloc_->end_allocate_to_pool(pool);  // and ended through the allocator
  EXPECT_FALSE(alloc_->get_pool_options(pool).no_split);
  pool_options o;
  o.no_split = true;
  pools.set_options(pool, o);
  EXPECT_TRUE(alloc_->get_pool_options(pool).no_split);
  alloc_->deallocate(p);
  pools.release_pool(pool);
  synchronize();
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0);
}

TEST_P(pool_seam_test, TheChecksAreTheSameForEveryBackend) {
  device_pools& pools = alloc_->pools(0);
  EXPECT_THROW(pools.begin_allocate_to_pool(mempool_id{}, [](stream_t) { return true; }), error);
  EXPECT_THROW(pools.begin_allocate_to_pool(allocator::create_pool_id(), nullptr), error);
  EXPECT_THROW(pools.release_pool(mempool_id{}), error);
  EXPECT_THROW(pools.set_options(mempool_id{}, pool_options{}), error);
  EXPECT_THROW((void)pools.options(mempool_id{}), error);
  EXPECT_THROW((void)pools.allocate_at(nullptr, 512, allocator::create_pool_id()), error);
  EXPECT_THROW((void)pools.allocate_at(reinterpret_cast<void*>(0x1000), 1000, allocator::create_pool_id()), error);
  EXPECT_THROW((void)alloc_->pools(99), error) << "a device out of range";
}

TEST_P(pool_seam_test, CheckingModePassesThePoolsOnButNotAllocationsAtAnAddress) {
  if (GetParam().real_device) GTEST_SKIP() << "checking mode is covered on the sim";
  auto checked = make_allocator(parse_config(GetParam().config + ",debug_checks:True"), driver_);
  const stream_t s = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  checked->pools(0).begin_allocate_to_pool(pool, [s](stream_t x) { return x == s; });
  void* p = checked->allocate(4096, s);
  checked->pools(0).end_allocate_to_pool(pool);
  checked->deallocate(p);
  try {
    (void)checked->pools(0).allocate_at(p, 4096, pool);
    ADD_FAILURE() << "allocate_at went through checking mode";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("debug_checks"), std::string::npos) << e.what();
  }
  checked->pools(0).release_pool(pool);
  synchronize();
  checked->empty_cache();
  EXPECT_EQ(checked->stats().reserved_bytes[0].current, 0);
}

INSTANTIATE_TEST_SUITE_P(every_backend, pool_seam_test, ::testing::ValuesIn(all_backend_cases()), backend_case_name);

}  // namespace
}  // namespace streampool::testing
