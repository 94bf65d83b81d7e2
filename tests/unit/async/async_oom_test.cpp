// async_oom_test.cpp — out of memory in the cudaMallocAsync backend: the per_process_memory_fraction
// cap (checked before the driver is asked), the synchronise + trim + retry-once path, the rich
// message, the counters and the `oom` trace entry.
#include <functional>
#include <string>

#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

class async_oom : public async_fixture {
 protected:
  void SetUp() override {
    sim_options options;
    options.capacity = gib;
    make(options, "per_process_memory_fraction:0.5");
  }
};

TEST_F(async_oom, FractionCapRefusesBeforeTheDriver) {
  alloc_->record_history(true);
  const std::string message = message_of([&] { (void)alloc_->allocate(600 * mib); });
  EXPECT_TRUE(contains(message, "CUDA out of memory. Tried to allocate 600.00 MiB")) << message;
  EXPECT_TRUE(contains(message, "GPU 0 has a total capacity of 1024.00 MiB")) << message;
  EXPECT_TRUE(contains(message, "512.00 MiB allowed (per_process_memory_fraction)")) << message;
  EXPECT_TRUE(contains(message, "cudaMallocAsync backend")) << message;
  EXPECT_TRUE(contains(message, "would exceed allowed memory")) << message;
  EXPECT_TRUE(contains(message, "raise per_process_memory_fraction")) << message;
  EXPECT_FALSE(contains(message, "expandable_segments")) << message;  // a native-only key
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 0u);
  const memory_stats stats = alloc_->stats(0);
  EXPECT_EQ(stats.num_ooms, 1);
  EXPECT_EQ(stats.num_alloc_retries, 0);
  EXPECT_EQ(stats.allocation[0].current, 0);
  const std::vector<trace_entry> trace = alloc_->trace(0);
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].action, trace_action::oom);
  EXPECT_EQ(trace[0].size, 600 * mib);
  EXPECT_EQ(trace[0].address, gib);  // device free bytes: nothing is in use
}

// Note [Impossible requests]: larger than the device, so refused without asking the pool (on the
// H200 asking took ~11 s and starved other processes), whatever the cap.
TEST_F(async_oom, ARequestLargerThanTheDeviceIsRefusedWithoutADriverCall) {
  alloc_->set_memory_fraction(1.0);  // no cap: the device size alone refuses it
  alloc_->record_history(true);
  const std::string message = message_of([&] { (void)alloc_->allocate(2 * gib); });
  EXPECT_TRUE(contains(message, "Tried to allocate 2.00 GiB")) << message;
  EXPECT_TRUE(contains(message, "larger than device 0's total memory (1024.00 MiB)")) << message;
  EXPECT_TRUE(contains(message, "the driver was not asked")) << message;
  // Note [PyTorch's words for an async OOM]: PyTorch's test_out_of_memory matches this text.
  EXPECT_TRUE(contains(message, "Allocation on device 0 would exceed allowed memory")) << message;
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 0u);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 0u) << "no trim either";
  EXPECT_EQ(alloc_->stats(0).num_ooms, 1);
  void* p = alloc_->allocate(mib);  // and the allocator keeps working
  EXPECT_NE(p, nullptr);
  alloc_->deallocate(p);
}

TEST_F(async_oom, CapCountsWhatThisAllocatorHolds) {
  void* p = alloc_->allocate(400 * mib);
  const std::string message = message_of([&] { (void)alloc_->allocate(200 * mib); });
  EXPECT_TRUE(contains(message, "this allocator holds 400.00 MiB")) << message;
  EXPECT_TRUE(contains(message, "400.00 MiB is allocated by streampool")) << message;
  void* q = alloc_->allocate(100 * mib);  // 500 MiB <= 512 MiB
  alloc_->deallocate(p);
  void* r = alloc_->allocate(400 * mib);  // fits again once p is freed
  alloc_->deallocate(q);
  alloc_->deallocate(r);
  EXPECT_EQ(alloc_->stats(0).num_ooms, 1);
}

TEST_F(async_oom, SetMemoryFractionChangesTheCap) {
  EXPECT_DOUBLE_EQ(alloc_->memory_fraction(0), 0.5);  // the config value, before first use
  alloc_->set_memory_fraction(0.25, 0);
  EXPECT_DOUBLE_EQ(alloc_->memory_fraction(0), 0.25);
  EXPECT_THROW((void)alloc_->allocate(300 * mib), out_of_memory);
  alloc_->set_memory_fraction(1.0, 0);
  void* p = alloc_->allocate(300 * mib);
  alloc_->deallocate(p);
  alloc_->set_memory_fraction(0.0, 0);
  EXPECT_THROW((void)alloc_->allocate(1), out_of_memory);  // 0 forbids everything
  EXPECT_THROW(alloc_->set_memory_fraction(1.5, 0), error);
  EXPECT_DOUBLE_EQ(alloc_->memory_fraction(0), 0.0);
}

TEST_F(async_oom, DriverOomIsRetriedOnceAfterSyncAndTrim) {
  sim_->fail_next(driver_call::malloc_async, 1);
  void* p = alloc_->allocate(mib);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 2u);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 1u);
  EXPECT_EQ(sim_->calls(driver_call::pool_trim_to), 1u);
  const memory_stats stats = alloc_->stats(0);
  EXPECT_EQ(stats.num_alloc_retries, 1);
  EXPECT_EQ(stats.num_ooms, 0);
  EXPECT_EQ(stats.num_sync_all_streams, 1);
  EXPECT_EQ(stats.allocation[0].current, 1);
  alloc_->deallocate(p);
}

TEST_F(async_oom, SecondFailureRaisesTheRichMessage) {
  alloc_->record_history(true);
  sim_->fail_next(driver_call::malloc_async, 2);
  const std::string message = message_of([&] { (void)alloc_->allocate(3 * mib); });
  EXPECT_TRUE(contains(message, "Tried to allocate 3.00 MiB")) << message;
  EXPECT_TRUE(contains(message, "retried once")) << message;
  EXPECT_TRUE(contains(message, "cudaMallocAsync backend")) << message;
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 2u);
  const memory_stats stats = alloc_->stats(0);
  EXPECT_EQ(stats.num_alloc_retries, 1);
  EXPECT_EQ(stats.num_ooms, 1);
  EXPECT_EQ(stats.allocation[0].current, 0);
  EXPECT_EQ(stats.num_device_alloc, 0);
  const std::vector<trace_entry> trace = alloc_->trace(0);
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.back().action, trace_action::oom);
  // The allocator keeps working.
  alloc_->deallocate(alloc_->allocate(3 * mib));
}

TEST_F(async_oom, RealExhaustionOfTheDevice) {
  sim_options options;
  options.capacity = 64 * mib;
  make(options);
  void* p = alloc_->allocate(40 * mib);
  const std::string message = message_of([&] { (void)alloc_->allocate(40 * mib); });
  EXPECT_TRUE(contains(message, "Tried to allocate 40.00 MiB")) << message;
  EXPECT_TRUE(contains(message, "total capacity of 64.00 MiB")) << message;
  EXPECT_FALSE(contains(message, "allowed (per_process_memory_fraction)")) << message;  // no cap set
  // Note [PyTorch's words for an async OOM]
  EXPECT_TRUE(contains(message, "would exceed allowed memory (the driver is out of memory)")) << message;
  EXPECT_EQ(alloc_->stats(0).num_alloc_retries, 1);
  alloc_->deallocate(p);
  alloc_->deallocate(alloc_->allocate(40 * mib));  // fits after the free
}

TEST_F(async_oom, OtherDriverErrorsAreNotOutOfMemory) {
  sim_->fail_next(driver_call::malloc_async, 1, status::other);
  EXPECT_THROW(
      {
        try {
          (void)alloc_->allocate(mib);
        } catch (const out_of_memory&) {
          FAIL() << "status::other must not become out_of_memory";
        }
      },
      cuda_error);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 0u);  // no retry for a non-OOM error
  EXPECT_EQ(alloc_->stats(0).num_ooms, 0);
}

TEST_F(async_oom, AbsurdSizesAreRefusedByTheInterface) {
  EXPECT_THROW((void)alloc_->allocate(max_request_bytes), out_of_memory);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 0u);
}

}  // namespace
}  // namespace streampool::testing
