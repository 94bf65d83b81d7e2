// Several devices: per-device state, allocation on a device other than the current one, per-device
// statistics, fraction and empty_cache over every device.
#include <gtest/gtest.h>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

sim_options devices(int n, std::size_t capacity = 80 * GiB) {
  sim_options o;
  o.device_count = n;
  o.capacity = capacity;
  return o;
}

TEST(multi_device, AllocatesOnTheRequestedDevice) {
  native_env env("", devices(3));
  ASSERT_TRUE(env.sim->set_device(0).ok());
  void* p0 = env.alloc->allocate(4096);       // current device
  void* p2 = env.alloc->allocate(4096, nullptr, 2);
  void* p2b = env.alloc->allocate(3 * MiB, nullptr, 2);
  EXPECT_EQ(env.stats(0).segment[all].current, 1);
  EXPECT_EQ(env.stats(1).segment[all].current, 0);
  EXPECT_EQ(env.stats(2).segment[all].current, 2);
  EXPECT_EQ(env.sim->bytes_in_use(2), 22 * MiB);
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * MiB);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 3u);
  int on2 = 0;
  for (const segment_info& s : segs) on2 += s.device == 2 ? 1 : 0;
  EXPECT_EQ(on2, 2);
  // Frees need no device argument: the segment map covers every device.
  env.alloc->deallocate(p2);
  env.alloc->deallocate(p0);
  env.alloc->deallocate(p2b);
  EXPECT_EQ(env.stats(2).allocated_bytes[all].current, 0);
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats(0).num_sync_all_streams, 1);
  EXPECT_EQ(env.stats(2).num_sync_all_streams, 1);
  EXPECT_EQ(env.sim->bytes_in_use(0) + env.sim->bytes_in_use(2), 0u);
}

TEST(multi_device, CurrentDeviceIsFollowed) {
  native_env env("", devices(2));
  ASSERT_TRUE(env.sim->set_device(1).ok());
  void* p = env.alloc->allocate(4096);
  EXPECT_EQ(env.stats(1).allocation[all].current, 1);
  EXPECT_EQ(env.stats(0).allocation[all].current, 0);
  ASSERT_TRUE(env.sim->set_device(0).ok());
  env.alloc->deallocate(p);
  EXPECT_EQ(env.stats(1).allocation[all].current, 0);
}

TEST(multi_device, FractionAndOomArePerDevice) {
  native_env env("", devices(2, 100 * MiB));
  env.alloc->set_memory_fraction(0.2, 1);
  EXPECT_DOUBLE_EQ(env.alloc->memory_fraction(0), 1.0);
  EXPECT_DOUBLE_EQ(env.alloc->memory_fraction(1), 0.2);
  void* ok = env.alloc->allocate(50 * MiB, nullptr, 0);
  EXPECT_THROW((void)env.alloc->allocate(50 * MiB, nullptr, 1), out_of_memory);
  EXPECT_EQ(env.stats(1).num_ooms, 1);
  EXPECT_EQ(env.stats(0).num_ooms, 0);
  env.alloc->deallocate(ok);
}

TEST(multi_device, TracesArePerDevice) {
  native_env env("", devices(2));
  env.alloc->record_history(true);
  env.alloc->deallocate(env.alloc->allocate(512, nullptr, 1));
  EXPECT_TRUE(env.alloc->trace(0).empty());
  const auto t = env.alloc->trace(1);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].device, 1);
}

}  // namespace
}  // namespace streampool::test
