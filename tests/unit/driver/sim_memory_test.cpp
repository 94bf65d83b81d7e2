// sim_memory_test.cpp — the sim driver's devices and plain device memory: options validation,
// device info, the per-thread (and per-instance) current device, malloc alignment and
// accounting, address reuse (and the bump mode that never reuses), capacity and out_of_memory,
// and free's error paths. The address model itself: sim_address_model_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "driver_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

sim_options devices(int count, std::size_t capacity = 80 * gib) {
  sim_options options;
  options.device_count = count;
  options.capacity = capacity;
  return options;
}

TEST(sim_options_validation, RejectsBadDeviceCountsAndGranularities) {
  EXPECT_THROW(sim_driver(devices(-1)), error);
  EXPECT_THROW(sim_driver(devices(65)), error);
  sim_options odd;
  odd.vmm_granularity = 3 * mib;
  EXPECT_THROW(sim_driver{odd}, error);
  odd.vmm_supported = false;  // granularity is irrelevant without VMM
  EXPECT_NO_THROW(sim_driver{odd});
}

TEST(sim_no_device, EveryDeviceCallReportsNoDevice) {
  sim_driver sim(devices(0));
  int count = -1;
  EXPECT_EQ(sim.device_count(&count).code, status::no_device);
  EXPECT_EQ(count, 0);
  int device = -1;
  EXPECT_EQ(sim.get_device(&device).code, status::no_device);
  EXPECT_EQ(sim.set_device(0).code, status::no_device);
  void* ptr = nullptr;
  EXPECT_EQ(sim.malloc(0, 1, &ptr).code, status::no_device);
  stream_t stream = nullptr;
  EXPECT_EQ(sim.stream_create(0, &stream).code, status::no_device);
  EXPECT_EQ(sim.describe(sim.set_device(0)), "sim: no_device");
}

class sim_memory : public sim_test {
 protected:
  sim_options make_options() override { return devices(2, 2 * gib); }
};

TEST_F(sim_memory, DeviceInfoReflectsTheOptions) {
  device_info info;
  ASSERT_TRUE(ok(sim().get_device_info(1, &info)));
  EXPECT_EQ(info.ordinal, 1);
  EXPECT_EQ(info.name, "streampool simulated device");
  EXPECT_EQ(info.total_memory, 2 * gib);
  EXPECT_EQ(info.compute_major, 9);
  EXPECT_TRUE(info.memory_pools_supported);
  EXPECT_TRUE(info.vmm_supported);
  EXPECT_EQ(info.vmm_granularity, 2 * mib);
  EXPECT_TRUE(fails(status::invalid_device, sim().get_device_info(2, &info)));
  EXPECT_TRUE(fails(status::invalid_device, sim().get_device_info(-1, &info)));

  sim_options plain = devices(1);
  plain.vmm_supported = false;
  plain.memory_pools_supported = false;
  plain.device_name = "plain";
  sim_driver other(plain);
  ASSERT_TRUE(succeeded(other, other.get_device_info(0, &info)));
  EXPECT_EQ(info.name, "plain");
  EXPECT_FALSE(info.vmm_supported);
  EXPECT_EQ(info.vmm_granularity, 0u);
  EXPECT_FALSE(info.memory_pools_supported);
}

TEST_F(sim_memory, CurrentDeviceIsPerThread) {
  ASSERT_TRUE(ok(sim().set_device(1)));
  int seen_by_other = -1;
  int after_other_set = -1;
  std::thread other([&] {
    EXPECT_TRUE(ok(sim().get_device(&seen_by_other)));
    EXPECT_TRUE(ok(sim().set_device(0)));
  });
  other.join();
  ASSERT_TRUE(ok(sim().get_device(&after_other_set)));
  EXPECT_EQ(seen_by_other, 0) << "a new thread starts on device 0";
  EXPECT_EQ(after_other_set, 1) << "another thread's set_device does not leak into this one";
  EXPECT_TRUE(fails(status::invalid_device, sim().set_device(2)));
}

TEST_F(sim_memory, CurrentDeviceIsPerDriverInstance) {
  sim_driver second(devices(2));
  ASSERT_TRUE(ok(sim().set_device(1)));
  int device = -1;
  ASSERT_TRUE(succeeded(second, second.get_device(&device)));
  EXPECT_EQ(device, 0);
}

TEST_F(sim_memory, MallocAlignsLikeCudaMallocAndChargesRoundedSizes) {
  void* tiny = nullptr;
  void* large = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 1, &tiny)));
  EXPECT_EQ(address(tiny) % 512, 0u);
  EXPECT_EQ(sim().bytes_in_use(0), 512u);
  ASSERT_TRUE(ok(sim().malloc(0, 3 * mib, &large)));
  EXPECT_EQ(address(large) % (2 * mib), 0u) << "allocations of 2 MiB and more are 2 MiB aligned";
  EXPECT_EQ(sim().bytes_in_use(0), 512u + 4 * mib) << "3 MiB occupies two 2 MiB pages";
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_TRUE(ok(sim().mem_get_info(0, &free_bytes, &total_bytes)));
  EXPECT_EQ(total_bytes, 2 * gib);
  EXPECT_EQ(free_bytes, 2 * gib - 512 - 4 * mib);
  EXPECT_EQ(sim().bytes_in_use(1), 0u) << "device 1 is untouched";
  EXPECT_TRUE(ok(sim().free(0, tiny)));
  EXPECT_TRUE(ok(sim().free(0, large)));
  EXPECT_EQ(sim().bytes_in_use(0), 0u);
  EXPECT_THROW((void)sim().bytes_in_use(2), error);
}

TEST_F(sim_memory, LiveAddressesNeverOverlapAndFreedOnesAreReused) {
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;
  std::vector<std::uintptr_t> freed;
  for (int round = 0; round < 60; ++round) {
    void* ptr = nullptr;
    const std::size_t bytes = (round % 5 + 1) * 1000 + (round % 7 == 0 ? 3 * mib : 0);
    ASSERT_TRUE(ok(sim().malloc(0, bytes, &ptr)));
    for (const auto& [start, length] : live) {
      EXPECT_TRUE(address(ptr) + bytes <= start || address(ptr) >= start + length) << "round " << round;
    }
    live.emplace_back(address(ptr), bytes);
    if (round % 3 == 2) {  // free the oldest live one
      freed.push_back(live.front().first);
      ASSERT_TRUE(ok(sim().free(0, reinterpret_cast<void*>(live.front().first))));
      live.erase(live.begin());
    }
  }
  std::size_t reused = 0;
  for (const auto& [start, length] : live) {
    reused += static_cast<std::size_t>(std::count(freed.begin(), freed.end(), start));
  }
  EXPECT_GT(reused, 0u) << "like cudaMalloc, the sim hands freed addresses out again";
  void* other = nullptr;
  ASSERT_TRUE(ok(sim().malloc(1, 1000, &other)));
  for (const auto& [start, length] : live) {
    EXPECT_TRUE(address(other) + 1000 <= start || address(other) >= start + length)
        << "devices have disjoint address spaces";
  }
}

TEST_F(sim_memory, AReusedAddressReadsZerosNotTheFreedBlocksBytes) {
  void* first = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 4 * mib, &first)));
  const std::vector<std::uint8_t> pattern(64, 0xab);
  sim().write_bytes(static_cast<char*>(first) + mib, pattern.data(), pattern.size());
  ASSERT_EQ(sim().read_bytes(static_cast<char*>(first) + mib, pattern.size()), pattern);
  ASSERT_TRUE(ok(sim().free(0, first)));
  void* second = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 4 * mib, &second)));
  ASSERT_EQ(second, first) << "the freed range is handed out again";
  EXPECT_EQ(sim().read_bytes(static_cast<char*>(second) + mib, pattern.size()), std::vector<std::uint8_t>(64, 0))
      << "cudaFree gave the pages back: the new allocation does not see the old bytes";
}

TEST(sim_bump_addresses, AreIncreasingAndNeverReused) {
  sim_options options;
  options.malloc_addresses = sim_addresses::bump;
  sim_driver sim(options);
  std::vector<std::uintptr_t> seen;
  std::uintptr_t previous_end = 0;
  for (int round = 0; round < 50; ++round) {
    void* ptr = nullptr;
    const std::size_t bytes = (round % 5 + 1) * 1000 + (round % 7 == 0 ? 3 * mib : 0);
    ASSERT_TRUE(succeeded(sim, sim.malloc(0, bytes, &ptr)));
    EXPECT_GE(address(ptr), previous_end) << "bump order: past every earlier block, freed or not";
    EXPECT_EQ(address(ptr) % (bytes >= 2 * mib ? 2 * mib : 512), 0u);
    previous_end = address(ptr) + bytes;
    seen.push_back(address(ptr));
    ASSERT_TRUE(succeeded(sim, sim.free(0, ptr)));
  }
  EXPECT_TRUE(fails_with(sim, status::invalid_value, sim.free(0, reinterpret_cast<void*>(seen.front()))))
      << "a stale pointer stays invalid";
}

TEST_F(sim_memory, ZeroBytesGiveNullptrAndCostNothing) {
  void* ptr = reinterpret_cast<void*>(0x1);
  ASSERT_TRUE(ok(sim().malloc(0, 0, &ptr)));
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(sim().bytes_in_use(0), 0u);
  EXPECT_TRUE(ok(sim().free(0, nullptr)));
}

TEST_F(sim_memory, CapacityIsExactAndOutOfMemoryNamesTheDevice) {
  void* all = nullptr;
  ASSERT_TRUE(ok(sim().malloc(1, 2 * gib, &all)));
  void* more = reinterpret_cast<void*>(0x1);
  const drv_result failed = sim().malloc(1, 1, &more);
  EXPECT_EQ(failed.code, status::out_of_memory);
  EXPECT_EQ(more, nullptr);
  EXPECT_EQ(sim().describe(failed), "sim: out_of_memory (device 1: 2.00 GiB capacity, 2.00 GiB in use)");
  ASSERT_TRUE(ok(sim().malloc(0, 1, &more))) << "device 0 is independent";
  EXPECT_TRUE(fails(status::out_of_memory, sim().malloc(1, SIZE_MAX, &more))) << "no overflow";
  EXPECT_TRUE(ok(sim().free(1, all)));
  EXPECT_TRUE(ok(sim().malloc(1, gib, &all))) << "memory comes back after free";
}

TEST_F(sim_memory, FreeRejectsUnknownInteriorRepeatedAndForeignPointers) {
  void* ptr = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 4096, &ptr)));
  EXPECT_TRUE(fails(status::invalid_value, sim().free(0, reinterpret_cast<void*>(0xdead000))));
  EXPECT_TRUE(fails(status::invalid_value, sim().free(0, static_cast<char*>(ptr) + 512)));
  EXPECT_TRUE(fails(status::invalid_value, sim().free(1, ptr))) << "belongs to device 0";
  EXPECT_TRUE(fails(status::invalid_device, sim().free(5, ptr)));
  EXPECT_EQ(sim().bytes_in_use(0), 4096u) << "failed frees change nothing";
  EXPECT_TRUE(ok(sim().free(0, ptr)));
  EXPECT_TRUE(fails(status::invalid_value, sim().free(0, ptr))) << "double free";
  EXPECT_TRUE(fails(status::invalid_device, sim().malloc(7, 1, &ptr)));
  std::size_t bytes = 0;
  EXPECT_TRUE(fails(status::invalid_device, sim().mem_get_info(2, &bytes, &bytes)));
}

TEST_F(sim_memory, FreeSynchronisesItsDevice) {
  sim().set_eager(false);
  const stream_t on_zero = new_stream(0);
  const stream_t on_one = new_stream(1);
  const event_t zero_done = new_event(0);
  const event_t one_done = new_event(1);
  ASSERT_TRUE(ok(sim().event_record(zero_done, on_zero)));
  ASSERT_TRUE(ok(sim().event_record(one_done, on_one)));
  void* ptr = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 1, &ptr)));
  ASSERT_TRUE(ok(sim().free(0, ptr)));
  EXPECT_TRUE(ok(sim().event_query(zero_done)));
  EXPECT_TRUE(fails(status::not_ready, sim().event_query(one_done))) << "only device 0 was synchronised";
}

TEST(sim_address_space, ExhaustionIsReportedNotWrapped) {
  // The malloc part of a device is 1 PiB, 512 MiB of which the simulated context holds.
  sim_options options;
  options.capacity = std::size_t{1} << 50;
  sim_driver sim(options);
  const std::size_t quarter = std::size_t{1} << 48;
  std::vector<void*> live(3);
  for (void*& ptr : live) {
    ASSERT_TRUE(succeeded(sim, sim.malloc(0, quarter, &ptr)));
  }
  void* ptr = nullptr;
  const drv_result exhausted = sim.malloc(0, quarter, &ptr);
  EXPECT_EQ(exhausted.code, status::other);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(sim.describe(exhausted), "sim: other (simulated address space exhausted)");
  ASSERT_TRUE(succeeded(sim, sim.free(0, live[1])));
  ASSERT_TRUE(succeeded(sim, sim.malloc(0, quarter / 2, &ptr))) << "freed address space comes back";
  EXPECT_GT(address(ptr), address(live[2]));
  EXPECT_LT(address(ptr), address(live[0]));
}

TEST(sim_address_space, BumpExhaustionIsReportedNotWrapped) {
  sim_options options;
  options.capacity = std::size_t{1} << 50;
  options.malloc_addresses = sim_addresses::bump;
  sim_driver sim(options);
  void* ptr = nullptr;
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(succeeded(sim, sim.malloc(0, std::size_t{1} << 49, &ptr)));
    ASSERT_TRUE(succeeded(sim, sim.free(0, ptr)));
  }
  const drv_result exhausted = sim.malloc(0, std::size_t{1} << 49, &ptr);
  EXPECT_EQ(exhausted.code, status::other);
  EXPECT_EQ(sim.describe(exhausted), "sim: other (simulated address space exhausted)");
}

}  // namespace
}  // namespace streampool::testing
