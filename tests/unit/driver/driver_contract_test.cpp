// driver_contract_test.cpp — the driver contract, written once and run on every driver: the
// sim driver here, and make_cuda_driver(), which skips (with the runtime's reason) on machines
// without a device and must pass on the GPU machine. Only behaviour that real CUDA and the sim
// share is asserted; sim-only rules (capture scripting, stale handles, ...) are in sim_*_test.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "driver_contract_test_support.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::testing {
namespace {

TEST_P(driver_contract, ReportsDevicesAndTheirFacts) {
  EXPECT_EQ(info_.ordinal, 0);
  EXPECT_FALSE(info_.name.empty());
  EXPECT_GT(info_.total_memory, 0u);
  EXPECT_GE(info_.compute_major, 1);
  if (info_.vmm_supported) {
    EXPECT_GT(info_.vmm_granularity, 0u);
    EXPECT_EQ(info_.vmm_granularity & (info_.vmm_granularity - 1), 0u) << "granularity is a power of two";
  } else {
    EXPECT_EQ(info_.vmm_granularity, 0u);
  }
  device_info beyond;
  EXPECT_EQ(drv_->get_device_info(count_, &beyond).code, status::invalid_device);
  EXPECT_FALSE(drv_->name().empty());
}

TEST_P(driver_contract, CurrentDeviceRoundTripsAndRejectsBadOrdinals) {
  int device = -1;
  ASSERT_TRUE(ok(drv_->get_device(&device)));
  EXPECT_EQ(device, 0);
  EXPECT_EQ(drv_->set_device(count_).code, status::invalid_device);
  ASSERT_TRUE(ok(drv_->get_device(&device)));
  EXPECT_EQ(device, 0) << "a failed set_device leaves the current device alone";
}

TEST_P(driver_contract, MemGetInfoIsConsistent) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_TRUE(ok(drv_->mem_get_info(0, &free_bytes, &total_bytes)));
  EXPECT_GT(total_bytes, 0u);
  EXPECT_LE(free_bytes, total_bytes);
  EXPECT_LE(total_bytes, info_.total_memory);
  std::size_t ignored = 0;
  EXPECT_EQ(drv_->mem_get_info(count_, &ignored, &ignored).code, status::invalid_device);
}

TEST_P(driver_contract, MallocAndFreeRoundTrip) {
  const std::size_t free_before = free_memory();
  void* small = nullptr;
  void* large = nullptr;
  ASSERT_TRUE(ok(drv_->malloc(0, 1000, &small)));
  ASSERT_TRUE(ok(drv_->malloc(0, 64 * mib, &large)));
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(address(small) % 256, 0u);
  EXPECT_EQ(address(large) % 256, 0u);
  EXPECT_TRUE(address(small) + 1000 <= address(large) || address(large) + 64 * mib <= address(small));
  EXPECT_LE(free_memory() + 64 * mib, free_before) << "a 64 MiB cudaMalloc shows in mem_get_info";
  EXPECT_TRUE(ok(drv_->free(0, small)));
  EXPECT_TRUE(ok(drv_->free(0, large)));
  EXPECT_TRUE(ok(drv_->free(0, nullptr)));
  void* relaxed = nullptr;
  {
    const relaxed_thread_scope scope(*drv_, true);
    ASSERT_TRUE(ok(drv_->malloc(0, 4096, &relaxed))) << "relaxed capture mode works outside capture";
  }
  EXPECT_NE(relaxed, nullptr);
  EXPECT_TRUE(ok(drv_->free(0, relaxed)));
  void* nothing = reinterpret_cast<void*>(0x1);
  ASSERT_TRUE(ok(drv_->malloc(0, 0, &nothing)));
  EXPECT_EQ(nothing, nullptr) << "zero bytes give nullptr";
}

TEST_P(driver_contract, ImpossibleMallocIsOutOfMemoryAndRecoverable) {
  void* ptr = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(drv_->malloc(0, info_.total_memory * 4, &ptr).code, status::out_of_memory);
  EXPECT_EQ(ptr, nullptr);
  ASSERT_TRUE(ok(drv_->malloc(0, mib, &ptr))) << "the failure left no error behind";
  EXPECT_TRUE(ok(drv_->free(0, ptr)));
}

TEST_P(driver_contract, FreeOfAPointerNeverAllocatedFailsCleanly) {
  void* live = nullptr;
  ASSERT_TRUE(ok(drv_->malloc(0, mib, &live)));
  const drv_result bogus = drv_->free(0, reinterpret_cast<void*>(address(live) + 4096));
  EXPECT_FALSE(bogus.ok());
  EXPECT_FALSE(drv_->describe(bogus).empty());
  EXPECT_TRUE(ok(drv_->free(0, live))) << "the bad free left the real block intact";
}

TEST_P(driver_contract, EventsCompleteAfterSynchronisation) {
  const stream_t stream = new_stream();
  const event_t event = new_event();
  EXPECT_TRUE(ok(drv_->event_query(event))) << "an event never recorded is complete";
  ASSERT_TRUE(ok(drv_->event_record(event, stream)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, stream)));
  EXPECT_TRUE(ok(drv_->event_query(event)));
  EXPECT_TRUE(ok(drv_->event_synchronize(event)));
  capture_info info{capture_status::active, 99};
  ASSERT_TRUE(ok(drv_->stream_capture_info(stream, &info)));
  EXPECT_EQ(info.status, capture_status::none) << "an idle stream is not capturing";
  EXPECT_EQ(info.id, 0u);
  ASSERT_TRUE(ok(drv_->event_record(event, stream)));
  ASSERT_TRUE(ok(drv_->stream_destroy(0, stream)));
  EXPECT_TRUE(ok(drv_->event_synchronize(event))) << "an event outlives its stream";
  EXPECT_TRUE(ok(drv_->event_query(event)));
  EXPECT_TRUE(ok(drv_->event_destroy(0, event)));
}

TEST_P(driver_contract, StreamWaitEventOrdersStreams) {
  const stream_t producer = new_stream();
  const stream_t consumer = new_stream();
  const event_t produced = new_event();
  const event_t consumed = new_event();
  ASSERT_TRUE(ok(drv_->event_record(produced, producer)));
  ASSERT_TRUE(ok(drv_->stream_wait_event(consumer, produced)));
  ASSERT_TRUE(ok(drv_->event_record(consumed, consumer)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, consumer)));
  EXPECT_TRUE(ok(drv_->event_query(consumed)));
  EXPECT_TRUE(ok(drv_->event_query(produced))) << "the consumer's completion implies the producer's";
  for (const event_t event : {produced, consumed}) {
    EXPECT_TRUE(ok(drv_->event_destroy(0, event)));
  }
  for (const stream_t stream : {producer, consumer}) {
    EXPECT_TRUE(ok(drv_->stream_destroy(0, stream)));
  }
}

TEST_P(driver_contract, DefaultStreamsAndDeviceSynchronize) {
  const auto per_thread = reinterpret_cast<stream_t>(2);  // cudaStreamPerThread
  const event_t event = new_event();
  ASSERT_TRUE(ok(drv_->event_record(event, nullptr)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, nullptr)));
  EXPECT_TRUE(ok(drv_->event_query(event)));
  ASSERT_TRUE(ok(drv_->event_record(event, per_thread)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, per_thread)));
  EXPECT_TRUE(ok(drv_->event_query(event)));
  ASSERT_TRUE(ok(drv_->event_record(event, nullptr)));
  ASSERT_TRUE(ok(drv_->device_synchronize(0)));
  EXPECT_TRUE(ok(drv_->event_query(event)));
  EXPECT_TRUE(ok(drv_->event_destroy(0, event)));
}

TEST_P(driver_contract, DefaultPoolAttributesRoundTrip) {
  if (!info_.memory_pools_supported) {
    GTEST_SKIP() << "device 0 has no memory pools";
  }
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(drv_->pool_get_default(0, &pool)));
  ASSERT_NE(pool, nullptr);
  const std::uint64_t saved = attr(pool, pool_attr::release_threshold);
  ASSERT_TRUE(ok(drv_->pool_set_attr(pool, pool_attr::release_threshold, UINT64_MAX)));
  EXPECT_EQ(attr(pool, pool_attr::release_threshold), UINT64_MAX);
  ASSERT_TRUE(ok(drv_->pool_set_attr(pool, pool_attr::release_threshold, saved)));
  EXPECT_EQ(attr(pool, pool_attr::release_threshold), saved);
  for (const pool_attr flag : {pool_attr::reuse_follow_event_dependencies, pool_attr::reuse_allow_opportunistic,
                               pool_attr::reuse_allow_internal_dependencies}) {
    EXPECT_LE(attr(pool, flag), 1u) << "reuse policies read back as 0 or 1";
  }
  EXPECT_FALSE(drv_->pool_set_attr(pool, pool_attr::used_mem_current, 0).ok()) << "current figures are read-only";
  EXPECT_FALSE(drv_->pool_set_attr(pool, pool_attr::reserved_mem_current, 0).ok());
  EXPECT_TRUE(ok(drv_->pool_set_access(pool, 0, true))) << "the owning device keeps read-write access";
}

TEST_P(driver_contract, CreatedPoolTracksUsedAndReservedMemory) {
  if (!info_.memory_pools_supported) {
    GTEST_SKIP() << "device 0 has no memory pools";
  }
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(drv_->pool_create(0, &pool)));
  const stream_t stream = new_stream();
  EXPECT_EQ(attr(pool, pool_attr::used_mem_current), 0u);
  EXPECT_EQ(attr(pool, pool_attr::reserved_mem_current), 0u);
  constexpr std::size_t bytes = 3 * mib + 100;
  void* ptr = nullptr;
  ASSERT_TRUE(ok(drv_->malloc_async(pool, bytes, stream, &ptr)));
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(address(ptr) % 256, 0u);
  const std::uint64_t used = attr(pool, pool_attr::used_mem_current);
  EXPECT_EQ(used, bytes) << "used_mem counts the bytes requested";
  EXPECT_GE(attr(pool, pool_attr::reserved_mem_current), used);
  EXPECT_GE(attr(pool, pool_attr::used_mem_high), used);
  ASSERT_TRUE(ok(drv_->free_async(ptr, stream)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, stream)));
  EXPECT_EQ(attr(pool, pool_attr::used_mem_current), 0u);
  EXPECT_GE(attr(pool, pool_attr::used_mem_high), used) << "the high-water mark survives the free";
  ASSERT_TRUE(ok(drv_->pool_trim_to(pool, 0)));
  EXPECT_EQ(attr(pool, pool_attr::reserved_mem_current), 0u);
  ASSERT_TRUE(ok(drv_->pool_set_attr(pool, pool_attr::used_mem_high, 0)));
  ASSERT_TRUE(ok(drv_->pool_set_attr(pool, pool_attr::reserved_mem_high, 0)));
  EXPECT_EQ(attr(pool, pool_attr::used_mem_high), 0u) << "resetting a high-water mark sets it to current";
  EXPECT_EQ(attr(pool, pool_attr::reserved_mem_high), 0u);
  EXPECT_TRUE(ok(drv_->stream_destroy(0, stream)));
  EXPECT_TRUE(ok(drv_->pool_destroy(pool)));
}

TEST_P(driver_contract, DefaultPoolServesMallocAsyncOnTheLegacyStream) {
  if (!info_.memory_pools_supported) {
    GTEST_SKIP() << "device 0 has no memory pools";
  }
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(drv_->pool_get_default(0, &pool)));
  const std::uint64_t used_before = attr(pool, pool_attr::used_mem_current);
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_TRUE(ok(drv_->malloc_async(pool, mib, nullptr, &first)));
  ASSERT_TRUE(ok(drv_->malloc_async(pool, mib, nullptr, &second)));
  EXPECT_NE(first, second);
  EXPECT_GE(attr(pool, pool_attr::used_mem_current), used_before + 2 * mib);
  EXPECT_TRUE(ok(drv_->free_async(first, nullptr)));
  EXPECT_TRUE(ok(drv_->free_async(second, nullptr)));
  ASSERT_TRUE(ok(drv_->stream_synchronize(0, nullptr)));
  EXPECT_EQ(attr(pool, pool_attr::used_mem_current), used_before);
  EXPECT_TRUE(ok(drv_->pool_trim_to(pool, 0)));
}

TEST_P(driver_contract, VmmReserveCreateMapAccessUnmapReleaseFree) {
  if (!info_.vmm_supported) {
    GTEST_SKIP() << "device 0 has no virtual memory management";
  }
  const std::size_t granularity = info_.vmm_granularity;
  void* va = nullptr;
  ASSERT_TRUE(ok(drv_->vmm_reserve(0, 2 * granularity, granularity, &va)));
  ASSERT_NE(va, nullptr);
  EXPECT_EQ(address(va) % granularity, 0u);
  const std::size_t free_before = free_memory();
  vmm_handle_t low = 0;
  vmm_handle_t high = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &low)));
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &high)));
  EXPECT_LE(free_memory() + 2 * granularity, free_before) << "physical memory is allocated by create";
  void* upper = reinterpret_cast<void*>(address(va) + granularity);
  ASSERT_TRUE(ok(drv_->vmm_map(va, granularity, low)));
  ASSERT_TRUE(ok(drv_->vmm_map(upper, granularity, high)));
  EXPECT_TRUE(ok(drv_->vmm_set_access(va, granularity, 0)));
  EXPECT_TRUE(ok(drv_->vmm_set_access(upper, granularity, 0)));
  EXPECT_TRUE(ok(drv_->vmm_release(high))) << "releasing a mapped handle is allowed";
  EXPECT_TRUE(ok(drv_->vmm_unmap(va, granularity)));
  EXPECT_TRUE(ok(drv_->vmm_unmap(upper, granularity)));
  EXPECT_TRUE(ok(drv_->vmm_release(low)));
  EXPECT_TRUE(ok(drv_->vmm_free(va, 2 * granularity)));
  // Device-wide free memory also moves with other processes (ctest -j runs GPU tests side by
  // side; seen on the H200: 128 KiB less); the 2 granules created here must come back, so allow
  // less than one granule of such noise.
  EXPECT_GE(free_memory() + granularity / 2, free_before) << "unmapping a released handle frees its memory";
}

TEST_P(driver_contract, VmmRejectsMisalignedAndOverlappingUse) {
  if (!info_.vmm_supported) {
    GTEST_SKIP() << "device 0 has no virtual memory management";
  }
  const std::size_t granularity = info_.vmm_granularity;
  void* va = nullptr;
  EXPECT_FALSE(drv_->vmm_reserve(0, granularity + granularity / 2, 0, &va).ok());
  vmm_handle_t odd = 0;
  EXPECT_FALSE(drv_->vmm_create(0, granularity / 2, &odd).ok());
  ASSERT_TRUE(ok(drv_->vmm_reserve(0, 2 * granularity, 0, &va)));
  vmm_handle_t handle = 0;
  vmm_handle_t other = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &handle)));
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &other)));
  EXPECT_FALSE(drv_->vmm_map(reinterpret_cast<void*>(address(va) + granularity / 2), granularity, handle).ok());
  ASSERT_TRUE(ok(drv_->vmm_map(va, granularity, handle)));
  EXPECT_FALSE(drv_->vmm_map(va, granularity, other).ok()) << "pages already mapped";
  EXPECT_TRUE(ok(drv_->vmm_unmap(va, granularity)));
  EXPECT_TRUE(ok(drv_->vmm_release(handle)));
  EXPECT_TRUE(ok(drv_->vmm_release(other)));
  EXPECT_TRUE(ok(drv_->vmm_free(va, 2 * granularity)));
}

TEST_P(driver_contract, InvalidDeviceOrdinalsAreRejected) {
  void* ptr = nullptr;
  stream_t stream = nullptr;
  event_t event = nullptr;
  mempool_t pool = nullptr;
  EXPECT_EQ(drv_->malloc(count_, 1, &ptr).code, status::invalid_device);
  EXPECT_EQ(drv_->stream_create(count_, &stream).code, status::invalid_device);
  EXPECT_EQ(drv_->event_create(count_, &event).code, status::invalid_device);
  EXPECT_EQ(drv_->stream_synchronize(count_, nullptr).code, status::invalid_device);
  if (info_.memory_pools_supported) {
    EXPECT_EQ(drv_->pool_get_default(count_, &pool).code, status::invalid_device);
    EXPECT_EQ(drv_->pool_create(count_, &pool).code, status::invalid_device);
  }
  EXPECT_EQ(drv_->stream_destroy(0, nullptr).code, status::invalid_value) << "the legacy stream is not destroyable";
}

TEST_P(driver_contract, PoolMisuseIsRejected) {
  if (!info_.memory_pools_supported) {
    GTEST_SKIP() << "device 0 has no memory pools";
  }
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(drv_->pool_get_default(0, &pool)));
  void* ptr = reinterpret_cast<void*>(0x1);
  EXPECT_TRUE(ok(drv_->malloc_async(pool, 0, nullptr, &ptr)));
  EXPECT_EQ(ptr, nullptr) << "zero bytes give nullptr, as with cudaMalloc";
  EXPECT_TRUE(ok(drv_->free_async(nullptr, nullptr)));
  void* live = nullptr;
  ASSERT_TRUE(ok(drv_->malloc_async(pool, mib, nullptr, &live)));
  EXPECT_EQ(drv_->free_async(reinterpret_cast<void*>(address(live) + 4096), nullptr).code, status::invalid_value);
  EXPECT_TRUE(ok(drv_->free_async(live, nullptr)));
  EXPECT_EQ(drv_->pool_destroy(pool).code, status::invalid_value) << "the default pool cannot be destroyed";
  EXPECT_EQ(drv_->pool_set_attr(pool, pool_attr::reserved_mem_high, 5).code, status::invalid_value)
      << "a high-water mark can only be reset to 0";
  EXPECT_EQ(drv_->pool_set_access(pool, 0, false).code, status::invalid_device)
      << "the owning device's access cannot be revoked";
  EXPECT_TRUE(ok(drv_->stream_synchronize(0, nullptr)));
}

TEST_P(driver_contract, DestroyingAPoolWithLiveMemoryIsDeferred) {
  if (!info_.memory_pools_supported) {
    GTEST_SKIP() << "device 0 has no memory pools";
  }
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(drv_->pool_create(0, &pool)));
  const stream_t stream = new_stream();
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_TRUE(ok(drv_->malloc_async(pool, 1000, stream, &first)));
  ASSERT_TRUE(ok(drv_->malloc_async(pool, 1000, stream, &second)));
  EXPECT_TRUE(ok(drv_->pool_destroy(pool)));
  EXPECT_TRUE(ok(drv_->free_async(first, stream))) << "allocations of a destroyed pool can still be freed";
  EXPECT_TRUE(ok(drv_->free_async(second, stream)));
  EXPECT_TRUE(ok(drv_->stream_synchronize(0, stream)));
  EXPECT_TRUE(ok(drv_->stream_destroy(0, stream)));
}

TEST_P(driver_contract, VmmRangesMaySpanMappingsButNotSplitThem) {
  if (!info_.vmm_supported) {
    GTEST_SKIP() << "device 0 has no virtual memory management";
  }
  const std::size_t granularity = info_.vmm_granularity;
  void* va = nullptr;
  ASSERT_TRUE(ok(drv_->vmm_reserve(0, 4 * granularity, 0, &va)));
  vmm_handle_t first = 0;
  vmm_handle_t second = 0;
  vmm_handle_t wide = 0;
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &first)));
  ASSERT_TRUE(ok(drv_->vmm_create(0, granularity, &second)));
  ASSERT_TRUE(ok(drv_->vmm_create(0, 2 * granularity, &wide)));
  void* upper = reinterpret_cast<void*>(address(va) + granularity);
  ASSERT_TRUE(ok(drv_->vmm_map(va, granularity, first)));
  ASSERT_TRUE(ok(drv_->vmm_map(upper, granularity, second)));
  EXPECT_TRUE(ok(drv_->vmm_set_access(va, 2 * granularity, 0))) << "one call may cover two mappings";
  EXPECT_EQ(drv_->vmm_set_access(va, 3 * granularity, 0).code, status::invalid_value) << "third page unmapped";
  EXPECT_EQ(drv_->vmm_free(va, 4 * granularity).code, status::invalid_value) << "still mapped";
  EXPECT_EQ(drv_->vmm_unmap(va, granularity / 2).code, status::invalid_value) << "part of a mapping";
  EXPECT_TRUE(ok(drv_->vmm_unmap(va, 2 * granularity))) << "one call may unmap two whole mappings";
  void* far = reinterpret_cast<void*>(address(va) + 2 * granularity);
  EXPECT_EQ(drv_->vmm_map(far, granularity, wide).code, status::not_supported) << "part of a handle";
  for (const vmm_handle_t handle : {first, second, wide}) {
    EXPECT_TRUE(ok(drv_->vmm_release(handle)));
  }
  EXPECT_EQ(drv_->vmm_release(first).code, status::invalid_value) << "released twice";
  EXPECT_EQ(drv_->vmm_free(va, 2 * granularity).code, status::invalid_value) << "not the whole reservation";
  EXPECT_TRUE(ok(drv_->vmm_free(va, 4 * granularity)));
  void* none = nullptr;
  vmm_handle_t nothing = 0;
  EXPECT_EQ(drv_->vmm_reserve(0, 0, 0, &none).code, status::invalid_value);
  EXPECT_EQ(drv_->vmm_reserve(0, granularity, 3, &none).code, status::invalid_value) << "alignment not a power of 2";
  EXPECT_EQ(drv_->vmm_create(0, 0, &nothing).code, status::invalid_value);
  EXPECT_EQ(drv_->vmm_create(count_, granularity, &nothing).code, status::invalid_device);
}

std::string case_name(const ::testing::TestParamInfo<driver_case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(drivers, driver_contract,
                         ::testing::Values(driver_case{"sim", [] { return std::make_shared<sim_driver>(); }},
                                           driver_case{"cuda", [] { return make_cuda_driver(); }}),
                         case_name);

}  // namespace
}  // namespace streampool::testing
