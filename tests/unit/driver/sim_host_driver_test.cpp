// sim_host_driver_test.cpp — the simulated device's pinned host memory: host_alloc / host_free
// (real, writable memory), host_register / host_unregister, the shared host capacity, fault
// injection, counters, cudaFreeHost's synchronisation and memcpy_async as stream work.
#include <gtest/gtest.h>

#include <cstring>

#include "streampool/errors.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::test {
namespace {

sim_options small_host() {
  sim_options options;
  options.host_capacity = 1 * mib;
  return options;
}

TEST(sim_host, AllocIsWritablePageAlignedMemoryCountedAgainstTheHostCapacity) {
  sim_driver sim(small_host());
  void* ptr = nullptr;
  ASSERT_TRUE(sim.host_alloc(1000, &ptr).ok());
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 4096, 0u);
  std::memset(ptr, 0xab, 1000);  // real memory
  EXPECT_EQ(sim.host_bytes_pinned(), 1000u);
  EXPECT_EQ(sim.live_host_allocs(), 1u);
  EXPECT_EQ(sim.calls(driver_call::host_alloc), 1u);
  ASSERT_TRUE(sim.host_free(ptr).ok());
  EXPECT_EQ(sim.host_bytes_pinned(), 0u);
  EXPECT_EQ(sim.calls(driver_call::host_free), 1u);
}

TEST(sim_host, BeyondTheCapacityIsOutOfMemoryAndSaysSo) {
  sim_driver sim(small_host());
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_TRUE(sim.host_alloc(768 * kib, &a).ok());
  const drv_result result = sim.host_alloc(512 * kib, &b);
  EXPECT_EQ(result.code, status::out_of_memory);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(sim.describe(result).find("simulated host"), std::string::npos) << sim.describe(result);
  void* huge = nullptr;
  EXPECT_EQ(sim.host_alloc(std::size_t{1} << 62, &huge).code, status::out_of_memory);
  EXPECT_EQ(sim.host_alloc(0, &huge).code, status::invalid_value);
  ASSERT_TRUE(sim.host_free(a).ok());
}

TEST(sim_host, FreeOfAForeignOrFreedPointerIsInvalid) {
  sim_driver sim(small_host());
  void* ptr = nullptr;
  ASSERT_TRUE(sim.host_alloc(64, &ptr).ok());
  int local = 0;
  EXPECT_EQ(sim.host_free(&local).code, status::invalid_value);
  EXPECT_EQ(sim.host_free(static_cast<char*>(ptr) + 8).code, status::invalid_value);
  ASSERT_TRUE(sim.host_free(ptr).ok());
  EXPECT_EQ(sim.host_free(ptr).code, status::invalid_value);
  EXPECT_TRUE(sim.host_free(nullptr).ok());
}

TEST(sim_host, RegisterRefusesOverlapsAndCountsAgainstTheCapacity) {
  sim_driver sim(small_host());
  std::vector<char> memory(3 * 256 * kib);
  EXPECT_EQ(sim.host_register(memory.data(), 0).code, status::invalid_value);
  EXPECT_EQ(sim.host_register(nullptr, 16).code, status::invalid_value);
  ASSERT_TRUE(sim.host_register(memory.data(), 256 * kib).ok());
  EXPECT_EQ(sim.host_register(memory.data() + 128 * kib, 256 * kib).code, status::invalid_value);
  ASSERT_TRUE(sim.host_register(memory.data() + 256 * kib, 256 * kib).ok());
  EXPECT_EQ(sim.host_bytes_pinned(), 512 * kib);
  EXPECT_EQ(sim.live_host_registrations(), 2u);
  EXPECT_EQ(sim.host_unregister(memory.data() + 8).code, status::invalid_value);
  ASSERT_TRUE(sim.host_unregister(memory.data()).ok());
  ASSERT_TRUE(sim.host_unregister(memory.data() + 256 * kib).ok());
  EXPECT_EQ(sim.host_unregister(memory.data()).code, status::invalid_value);
  EXPECT_EQ(sim.host_bytes_pinned(), 0u);
}

TEST(sim_host, FaultsAreInjectedLikeDeviceFaults) {
  sim_driver sim(small_host());
  sim.fail_next(driver_call::host_alloc, 2);
  void* ptr = nullptr;
  EXPECT_EQ(sim.host_alloc(64, &ptr).code, status::out_of_memory);
  EXPECT_EQ(sim.host_alloc(64, &ptr).code, status::out_of_memory);
  ASSERT_TRUE(sim.host_alloc(64, &ptr).ok());
  sim.fail_next(driver_call::host_free, 1, status::other);
  EXPECT_EQ(sim.host_free(ptr).code, status::other);
  EXPECT_EQ(sim.live_host_allocs(), 1u);  // a failed free keeps the memory
  ASSERT_TRUE(sim.host_free(ptr).ok());
  std::vector<char> memory(4096);
  sim.fail_next(driver_call::host_register, 1);
  EXPECT_EQ(sim.host_register(memory.data(), memory.size()).code, status::out_of_memory);
  EXPECT_EQ(sim.host_bytes_pinned(), 0u);
}

TEST(sim_host, HostFreeWaitsForEveryStreamLikeCudaFreeHost) {
  sim_options options = small_host();
  options.eager_completion = false;
  sim_driver sim(options);
  stream_t stream = nullptr;
  ASSERT_TRUE(sim.stream_create(0, &stream).ok());
  void* host = nullptr;
  void* device = nullptr;
  ASSERT_TRUE(sim.host_alloc(4096, &host).ok());
  ASSERT_TRUE(sim.malloc(0, 4096, &device).ok());
  event_t event = nullptr;
  ASSERT_TRUE(sim.event_create(0, &event).ok());
  ASSERT_TRUE(sim.memcpy_async(device, host, 4096, stream).ok());
  ASSERT_TRUE(sim.event_record(event, stream).ok());
  EXPECT_EQ(sim.event_query(event).code, status::not_ready);  // the copy is work on the stream
  ASSERT_TRUE(sim.host_free(host).ok());
  EXPECT_TRUE(sim.event_query(event).ok());
  EXPECT_EQ(sim.calls(driver_call::memcpy_async), 1u);
  (void)sim.event_destroy(0, event);
  (void)sim.free(0, device);
  (void)sim.stream_destroy(0, stream);
}

TEST(sim_host, MemcpyChecksItsStreamAndPointers) {
  sim_driver sim(small_host());
  int a = 0;
  int b = 0;
  EXPECT_EQ(sim.memcpy_async(&a, &b, sizeof a, reinterpret_cast<stream_t>(0x1234)).code, status::invalid_value);
  EXPECT_EQ(sim.memcpy_async(nullptr, &b, sizeof a, nullptr).code, status::invalid_value);
  EXPECT_TRUE(sim.memcpy_async(nullptr, nullptr, 0, nullptr).ok());
}

TEST(sim_host, MemoryLeftAtDestructionIsGivenBack) {
  // ASan/LSan would report the heap memory of a sim destroyed with host allocations still live.
  sim_driver sim(small_host());
  void* ptr = nullptr;
  ASSERT_TRUE(sim.host_alloc(128, &ptr).ok());
}

TEST(driver_defaults, HostCallsAreNotSupportedByADriverThatPredatesThem) {
  struct minimal : driver {
    std::string_view name() const noexcept override { return "minimal"; }
    std::string describe(drv_result) const override { return ""; }
    drv_result device_count(int*) noexcept override { return {}; }
    drv_result get_device(int*) noexcept override { return {}; }
    drv_result set_device(int) noexcept override { return {}; }
    drv_result get_device_info(int, device_info*) noexcept override { return {}; }
    drv_result mem_get_info(int, std::size_t*, std::size_t*) noexcept override { return {}; }
    drv_result malloc(int, std::size_t, void**) noexcept override { return {}; }
    drv_result free(int, void*) noexcept override { return {}; }
    drv_result stream_create(int, stream_t*) noexcept override { return {}; }
    drv_result stream_destroy(int, stream_t) noexcept override { return {}; }
    drv_result stream_synchronize(int, stream_t) noexcept override { return {}; }
    drv_result stream_wait_event(stream_t, event_t) noexcept override { return {}; }
    drv_result stream_capture_info(stream_t, capture_info*) noexcept override { return {}; }
    drv_result device_synchronize(int) noexcept override { return {}; }
    drv_result event_create(int, event_t*) noexcept override { return {}; }
    drv_result event_destroy(int, event_t) noexcept override { return {}; }
    drv_result event_record(event_t, stream_t) noexcept override { return {}; }
    drv_result event_query(event_t) noexcept override { return {}; }
    drv_result event_synchronize(event_t) noexcept override { return {}; }
    drv_result pool_get_default(int, mempool_t*) noexcept override { return {}; }
    drv_result pool_create(int, mempool_t*) noexcept override { return {}; }
    drv_result pool_destroy(mempool_t) noexcept override { return {}; }
    drv_result pool_set_attr(mempool_t, pool_attr, std::uint64_t) noexcept override { return {}; }
    drv_result pool_get_attr(mempool_t, pool_attr, std::uint64_t*) noexcept override { return {}; }
    drv_result pool_set_access(mempool_t, int, bool) noexcept override { return {}; }
    drv_result malloc_async(mempool_t, std::size_t, stream_t, void**) noexcept override { return {}; }
    drv_result free_async(void*, stream_t) noexcept override { return {}; }
    drv_result pool_trim_to(mempool_t, std::size_t) noexcept override { return {}; }
    drv_result vmm_reserve(int, std::size_t, std::size_t, void**) noexcept override { return {}; }
    drv_result vmm_free(void*, std::size_t) noexcept override { return {}; }
    drv_result vmm_create(int, std::size_t, vmm_handle_t*) noexcept override { return {}; }
    drv_result vmm_release(vmm_handle_t) noexcept override { return {}; }
    drv_result vmm_map(void*, std::size_t, vmm_handle_t) noexcept override { return {}; }
    drv_result vmm_set_access(void*, std::size_t, int) noexcept override { return {}; }
    drv_result vmm_unmap(void*, std::size_t) noexcept override { return {}; }
  } drv;
  void* out = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(drv.host_alloc(64, &out).code, status::not_supported);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(drv.host_free(nullptr).code, status::not_supported);
  EXPECT_EQ(drv.host_register(&out, 8).code, status::not_supported);
  EXPECT_EQ(drv.host_unregister(&out).code, status::not_supported);
  EXPECT_EQ(drv.memcpy_async(&out, &out, 8, nullptr).code, status::not_supported);
}

}  // namespace
}  // namespace streampool::test
