// thrust_integration_test.cpp — the Thrust/CUB/cuda::mr adapters (streampool/thrust_allocator.hpp,
// streampool/cuda_mr_resource.hpp). On the sim driver: the adapters' host logic (allocation and
// release through streampool, rebind and equality, RAII temp storage, CUB's two-phase protocol with
// a fake call, alignment rules). On a real GPU, for both backends: a device_vector sort, a CUB
// reduction and a cuda::mr resource_ref round trip (kernels/thrust_usage.cu), checking the results
// and that streampool served every allocation and got all of them back.
#include "streampool/cuda_mr_resource.hpp"  // first: it enables <cuda/memory_resource>
#include "streampool/thrust_allocator.hpp"

#include <cstdint>
#include <vector>

#include "c_api/c_api_internal.hpp"
#include "streampool/process_allocator.hpp"
#include "streampool_thrust_usage.hpp"
#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

std::int64_t live_allocations(const allocator& alloc) { return alloc.stats().allocation[0].current; }
std::int64_t total_allocations(const allocator& alloc) { return alloc.stats().allocation[0].allocated; }

// --- host logic, on the sim driver ------------------------------------------------------------

using thrust_adapter_sim = backend_test;

TEST_P(thrust_adapter_sim, ThrustAllocatorAllocatesFromStreampoolAndReturnsIt) {
  const stream_t s = new_stream();
  thrust_allocator<double> a(*alloc_, s);
  EXPECT_EQ(a.upstream(), alloc_.get());
  EXPECT_EQ(a.stream(), s);
  thrust_allocator<double>::pointer p = a.allocate(1000);
  ASSERT_NE(p.get(), nullptr);
  EXPECT_EQ(live_allocations(*alloc_), 1);
  EXPECT_GE(alloc_->stats().requested_bytes[0].current, static_cast<std::int64_t>(1000 * sizeof(double)));
  a.deallocate(p, 1000);
  EXPECT_EQ(live_allocations(*alloc_), 0);
  // n == 0 still yields a valid, distinct pointer (streampool itself rejects 0 bytes).
  p = a.allocate(0);
  EXPECT_NE(p.get(), nullptr);
  a.deallocate(p, 0);
  EXPECT_EQ(live_allocations(*alloc_), 0);
}

TEST_P(thrust_adapter_sim, ThrustAllocatorRebindAndEquality) {
  thrust_allocator<int> a(*alloc_);
  const thrust_allocator<int>::rebind<char>::other c(a);
  static_assert(std::is_same_v<decltype(c), const thrust_allocator<char>>);
  static_assert(std::is_same_v<thrust_allocator<int>::pointer, thrust::device_ptr<int>>);
  EXPECT_TRUE(a == c);
  EXPECT_FALSE(a != c);
  auto other = make_allocator(parse_config(GetParam().config), driver_);
  EXPECT_TRUE(a != thrust_allocator<int>(*other));
  EXPECT_FALSE(a == thrust_allocator<int>());
}

TEST_P(thrust_adapter_sim, ThrustAllocatorMisuseIsReportedAndHarmless) {
  thrust_allocator<int> unbound;
  EXPECT_THROW((void)unbound.allocate(1), error);
  unbound.deallocate(thrust::device_ptr<int>(), 1);  // no-op
  thrust_allocator<int> a(*alloc_);
  EXPECT_THROW((void)a.allocate(a.max_size() + 1), error);
  // A pointer streampool never handed out: swallowed (destructors call deallocate), state intact.
  int not_ours = 0;
  a.deallocate(thrust::device_ptr<int>(&not_ours), 1);
  auto p = a.allocate(4);
  EXPECT_EQ(live_allocations(*alloc_), 1);
  a.deallocate(p, 4);
  EXPECT_EQ(live_allocations(*alloc_), 0);
}

TEST_P(thrust_adapter_sim, TempStorageIsRaiiAndMovable) {
  const stream_t s = new_stream();
  {
    temp_storage t(*alloc_, 4096, s);
    ASSERT_NE(t.get(), nullptr);
    EXPECT_EQ(t.size(), 4096u);
    EXPECT_EQ(live_allocations(*alloc_), 1);
    temp_storage moved(std::move(t));
    EXPECT_EQ(t.get(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_NE(moved.get(), nullptr);
    temp_storage other(*alloc_, 100, s);
    EXPECT_EQ(live_allocations(*alloc_), 2);
    other = std::move(moved);  // releases other's block
    EXPECT_EQ(live_allocations(*alloc_), 1);
  }
  EXPECT_EQ(live_allocations(*alloc_), 0);
}

TEST_P(thrust_adapter_sim, CubTwoPhaseProtocolUsesStreampoolForTheSecondCall) {
  const stream_t s = new_stream();
  int calls = 0;
  const int status = cub_call_with_temp_storage(*alloc_, s, [&](void* tmp, std::size_t& bytes) {
    ++calls;
    if (calls == 1) {
      EXPECT_EQ(tmp, nullptr);
      bytes = 12345;
      return 0;
    }
    EXPECT_NE(tmp, nullptr);
    EXPECT_EQ(bytes, 12345u);
    EXPECT_EQ(live_allocations(*alloc_), 1);  // the temp storage is live during the call
    return 0;
  });
  EXPECT_EQ(status, 0);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(live_allocations(*alloc_), 0);
  EXPECT_EQ(total_allocations(*alloc_), 1);

  // A failing size query is returned as is, with no allocation and no second call.
  calls = 0;
  const int failed = cub_call_with_temp_storage(*alloc_, s, [&](void*, std::size_t&) {
    ++calls;
    return 7;
  });
  EXPECT_EQ(failed, 7);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(total_allocations(*alloc_), 1);
}

TEST_P(thrust_adapter_sim, CudaMrResourceAllocatesAndFreesThroughStreampool) {
  const stream_t s = new_stream();
  const stream_t other = new_stream();
  cuda_async_resource resource(*alloc_);
  ::cuda::mr::async_resource_ref<::cuda::mr::device_accessible> ref(resource);
  void* p = ref.allocate_async(1 << 20, 256, ::cuda::stream_ref(static_cast<cudaStream_t>(s)));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % allocation_alignment, 0u);
  EXPECT_EQ(live_allocations(*alloc_), 1);
  ref.deallocate_async(p, 1 << 20, 256, ::cuda::stream_ref(static_cast<cudaStream_t>(other)));
  EXPECT_EQ(live_allocations(*alloc_), 0);

  void* q = resource.allocate_sync(100);
  EXPECT_EQ(live_allocations(*alloc_), 1);
  resource.deallocate_sync(q, 100);
  EXPECT_EQ(live_allocations(*alloc_), 0);

  EXPECT_THROW((void)resource.allocate(64, 1024), error);  // above streampool's 512-byte alignment
  EXPECT_THROW((void)resource.allocate(64, 48), error);    // not a power of two
  EXPECT_EQ(total_allocations(*alloc_), 2);
  EXPECT_TRUE(resource == cuda_async_resource(*alloc_));
}

// The same adapters over the process's allocator (the C API's; process_allocator.hpp): their
// memory is the C API allocator's, and they compare equal through process_memory().
TEST_P(thrust_adapter_sim, AdaptersOverTheProcessAllocatorDrawFromTheCApisAllocator) {
  (void)c_api_impl::c_api_uninstall();
  c_api_impl::c_api_install(make_allocator(parse_config(GetParam().config), driver_));
  const auto live_in_c_api = [] { return live_allocations(*c_api_impl::instance()); };
  const stream_t s = new_stream();
  thrust_allocator<float, process_allocator> a(process_memory(), s);
  const thrust_allocator<float, process_allocator>::rebind<char>::other c(a);
  EXPECT_TRUE(a == c);
  auto p = a.allocate(1000);
  EXPECT_EQ(live_in_c_api(), 1);
  EXPECT_EQ(live_allocations(*alloc_), 0) << "not the fixture's allocator";
  a.deallocate(p, 1000);
  EXPECT_EQ(live_in_c_api(), 0);
  process_async_resource resource(process_memory(), s);
  void* q = resource.allocate_async(4096, 256, ::cuda::stream_ref(static_cast<cudaStream_t>(s)));
  {
    basic_temp_storage<process_allocator> tmp(process_memory(), 512, s);
    EXPECT_EQ(live_in_c_api(), 2);
  }
  EXPECT_EQ(live_in_c_api(), 1);
  resource.deallocate_async(q, 4096, 256, ::cuda::stream_ref(static_cast<cudaStream_t>(s)));
  EXPECT_EQ(live_in_c_api(), 0);
  EXPECT_TRUE(resource == process_async_resource(process_memory()));
  (void)c_api_impl::c_api_uninstall();
}

INSTANTIATE_TEST_SUITE_P(sim, thrust_adapter_sim, ::testing::ValuesIn(backend_cases(false)), backend_case_name);

// --- real GPU: kernels/thrust_usage.cu ------------------------------------------------------

using thrust_adapter_gpu = backend_test;

#define USAGE_OK(call)                                                                \
  do {                                                                                \
    const int code_ = (call);                                                         \
    ASSERT_EQ(code_, 0) << #call << ": " << kernels::thrust_usage_last_error();       \
  } while (0)

TEST_P(thrust_adapter_gpu, DeviceVectorSortDrawsFromStreampool) {
  const stream_t s = new_stream();
  const std::int64_t before = total_allocations(*alloc_);
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    bool ok = false;
    USAGE_OK(kernels::thrust_sort_with_streampool(*alloc_, n, s, &ok));
    EXPECT_TRUE(ok) << "n = " << n;
  }
  // At least the three vectors; the sorts' temporaries come through thrust_allocator<char> too.
  EXPECT_GE(total_allocations(*alloc_) - before, 4);
  EXPECT_EQ(live_allocations(*alloc_), 0) << "a vector or a sort temporary was not returned";
}

TEST_P(thrust_adapter_gpu, CubReduceWithStreampoolTempStorage) {
  const stream_t s = new_stream();
  const std::int64_t before = total_allocations(*alloc_);
  for (const std::size_t n : {std::size_t{1}, std::size_t{12345}, std::size_t{1} << 22}) {
    std::uint64_t sum = 0;
    std::size_t temp_bytes = 0;
    USAGE_OK(kernels::cub_reduce_with_streampool(*alloc_, n, s, &sum, &temp_bytes));
    EXPECT_EQ(sum, static_cast<std::uint64_t>(n) * (n + 1) / 2) << "n = " << n;
    EXPECT_GT(temp_bytes, 0u);
  }
  EXPECT_EQ(total_allocations(*alloc_) - before, 9);  // input, output, temp storage, three times
  EXPECT_EQ(live_allocations(*alloc_), 0);
}

TEST_P(thrust_adapter_gpu, CudaMrResourceRefRoundTrip) {
  const stream_t s = new_stream();
  const stream_t other = new_stream();
  const std::int64_t before = total_allocations(*alloc_);
  bool ok = false;
  USAGE_OK(kernels::mr_resource_roundtrip(*alloc_, 3 * mib + 17, s, other, &ok));
  EXPECT_TRUE(ok) << "data read back differs, or a 4096-byte alignment was not refused";
  synchronize();
  EXPECT_EQ(total_allocations(*alloc_) - before, 2);
  EXPECT_EQ(live_allocations(*alloc_), 0);
}

INSTANTIATE_TEST_SUITE_P(real_device, thrust_adapter_gpu, ::testing::ValuesIn(backend_cases(true)), backend_case_name);

}  // namespace
}  // namespace streampool::testing
