// sim_controls_test.cpp — the sim driver's test controls: scripted capture status and the calls
// it makes illegal, fault injection (count, skip, code, clearing), per-call counters, describe(),
// and a multi-threaded smoke test (run under TSAN by the sanitizer build).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "driver_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

class sim_capture : public sim_test {};

TEST_F(sim_capture, CaptureStatusIsReportedPerStream) {
  const stream_t capturing = new_stream();
  const stream_t idle = new_stream();
  sim().set_capture(capturing, capture_status::active, 42);
  capture_info info;
  ASSERT_TRUE(ok(sim().stream_capture_info(capturing, &info)));
  EXPECT_EQ(info.status, capture_status::active);
  EXPECT_EQ(info.id, 42u);
  ASSERT_TRUE(ok(sim().stream_capture_info(idle, &info)));
  EXPECT_EQ(info.status, capture_status::none);
  EXPECT_EQ(info.id, 0u);
  sim().set_capture(capturing, capture_status::invalidated, 42);
  ASSERT_TRUE(ok(sim().stream_capture_info(capturing, &info)));
  EXPECT_EQ(info.status, capture_status::invalidated);
  EXPECT_EQ(info.id, 0u) << "as CUDA: an id only while the capture is active";
  EXPECT_TRUE(ok(sim().device_synchronize(0))) << "an invalidated capture does not forbid anything";
  EXPECT_THROW(sim().set_capture(reinterpret_cast<stream_t>(0x5), capture_status::active, 1), error);
}

TEST_F(sim_capture, UnsafeCallsAreIllegalWhileAnyStreamCapturesAndDoNothing) {
  const stream_t capturing = new_stream();
  const stream_t other = new_stream();
  const event_t event = new_event();
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(sim().pool_get_default(0, &pool)));
  void* plain = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 4096, &plain)));
  void* va = nullptr;
  vmm_handle_t handle = 0;
  ASSERT_TRUE(ok(sim().vmm_reserve(0, 2 * mib, 0, &va)));
  ASSERT_TRUE(ok(sim().vmm_create(0, 2 * mib, &handle)));
  ASSERT_TRUE(ok(sim().vmm_map(va, 2 * mib, handle)));
  const std::size_t in_use = sim().bytes_in_use(0);

  sim().set_capture(capturing, capture_status::active, 7);
  void* ptr = nullptr;
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().malloc(0, 4096, &ptr)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().free(0, plain)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().event_query(event)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().event_synchronize(event)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().stream_synchronize(0, other)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().device_synchronize(0)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().pool_trim_to(pool, 0)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().vmm_unmap(va, 2 * mib)));
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().vmm_release(handle)));
  EXPECT_EQ(sim().bytes_in_use(0), in_use) << "the refused calls changed nothing";

  // Stream-ordered and relaxed calls stay legal.
  {
    const relaxed_thread_scope relaxed(sim(), true);
    EXPECT_TRUE(ok(sim().malloc(0, 4096, &ptr)));
  }
  EXPECT_TRUE(ok(sim().event_record(event, capturing)));
  EXPECT_TRUE(ok(sim().stream_wait_event(other, event)));
  void* async = nullptr;
  EXPECT_TRUE(ok(sim().malloc_async(pool, 4096, capturing, &async)));
  EXPECT_TRUE(ok(sim().free_async(async, capturing)));

  sim().set_capture(capturing, capture_status::none, 0);
  EXPECT_TRUE(ok(sim().free(0, plain)));
  EXPECT_TRUE(ok(sim().free(0, ptr)));
  EXPECT_TRUE(ok(sim().vmm_unmap(va, 2 * mib)));
  EXPECT_TRUE(ok(sim().vmm_release(handle)));
}

TEST_F(sim_capture, DestroyingTheCapturingStreamEndsTheCapture) {
  const stream_t capturing = new_stream();
  sim().set_capture(capturing, capture_status::active, 1);
  EXPECT_TRUE(fails(status::illegal_in_capture, sim().device_synchronize(0)));
  ASSERT_TRUE(ok(sim().stream_destroy(0, capturing)));
  EXPECT_TRUE(ok(sim().device_synchronize(0)));
}

class sim_faults : public sim_test {};

TEST_F(sim_faults, InjectedFailuresFireCountTimesAndDoNothing) {
  sim().fail_next(driver_call::malloc, 2);
  void* ptr = reinterpret_cast<void*>(0x1);
  const drv_result injected = sim().malloc(0, 4096, &ptr);
  EXPECT_EQ(injected.code, status::out_of_memory);
  EXPECT_EQ(sim().describe(injected), "sim: out_of_memory (injected fault)");
  EXPECT_TRUE(fails(status::out_of_memory, sim().malloc(0, 4096, &ptr)));
  EXPECT_EQ(sim().bytes_in_use(0), 0u);
  EXPECT_TRUE(ok(sim().malloc(0, 4096, &ptr))) << "only two";
  EXPECT_TRUE(ok(sim().free(0, ptr)));
}

TEST_F(sim_faults, SkipCountsSuccessfulCallsOnly) {
  sim().fail_next(driver_call::free, 1, status::other, 1);
  EXPECT_TRUE(fails(status::invalid_value, sim().free(0, reinterpret_cast<void*>(0x10)))) << "a natural failure";
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 1, &first)));
  ASSERT_TRUE(ok(sim().malloc(0, 1, &second)));
  EXPECT_TRUE(ok(sim().free(0, first))) << "the one success to skip";
  EXPECT_TRUE(fails(status::other, sim().free(0, second)));
  EXPECT_EQ(sim().bytes_in_use(0), 512u) << "the injected failure freed nothing";
  EXPECT_TRUE(ok(sim().free(0, second)));
}

TEST_F(sim_faults, AnyStatusCanBeInjectedIntoAnyCallAndCleared) {
  const event_t event = new_event();
  sim().fail_next(driver_call::event_query, 1, status::not_ready);
  EXPECT_TRUE(fails(status::not_ready, sim().event_query(event)));
  EXPECT_TRUE(ok(sim().event_query(event)));
  sim().fail_next(driver_call::vmm_create, 3, status::not_supported);
  sim().fail_next(driver_call::stream_create, 1, status::invalid_device);
  sim().clear_faults();
  vmm_handle_t handle = 0;
  EXPECT_TRUE(ok(sim().vmm_create(0, 2 * mib, &handle)));
  EXPECT_NE(new_stream(), nullptr);
  EXPECT_THROW(sim().fail_next(driver_call::malloc, -1), error);
  EXPECT_THROW(sim().fail_next(driver_call::malloc, 1, status::ok), error);
  EXPECT_THROW(sim().fail_next(driver_call::count_, 1), error);
}

TEST_F(sim_faults, CountersCountEveryCallIncludingFailures) {
  sim().reset_counters();
  void* ptr = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 1, &ptr)));
  EXPECT_FALSE(sim().malloc(0, SIZE_MAX, &ptr).ok());
  sim().fail_next(driver_call::malloc, 1);
  EXPECT_FALSE(sim().malloc(0, 1, &ptr).ok());
  EXPECT_EQ(sim().calls(driver_call::malloc), 3u);
  EXPECT_EQ(sim().calls(driver_call::free), 0u);
  const event_t event = new_event();
  EXPECT_TRUE(ok(sim().event_record(event, nullptr)));
  EXPECT_TRUE(ok(sim().event_query(event)));
  EXPECT_EQ(sim().calls(driver_call::event_create), 1u);
  EXPECT_EQ(sim().calls(driver_call::event_record), 1u);
  EXPECT_EQ(sim().calls(driver_call::event_query), 1u);
  EXPECT_EQ(sim().calls(driver_call::count_), 0u);
  sim().reset_counters();
  for (std::size_t index = 0; index < driver_call_count; ++index) {
    EXPECT_EQ(sim().calls(static_cast<driver_call>(index)), 0u);
  }
}

TEST(sim_describe, NamesTheStatusAndTheReason) {
  const sim_driver sim;
  EXPECT_EQ(sim.describe({}), "sim: ok");
  EXPECT_EQ(sim.describe({status::invalid_value, 3}), "sim: invalid_value");
  EXPECT_EQ(sim.name(), "sim");
}

TEST(sim_threads, ConcurrentStreamsAllocateAndSynchroniseSafely) {
  sim_options options;
  options.capacity = 4 * gib;
  sim_driver sim(options);
  constexpr int threads = 8;
  constexpr int rounds = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int worker = 0; worker < threads; ++worker) {
    workers.emplace_back([&, worker] {
      const auto good = [&](drv_result result) { failures += result.ok() ? 0 : 1; };
      stream_t stream = nullptr;
      event_t event = nullptr;
      mempool_t pool = nullptr;
      good(sim.set_device(0));
      good(sim.stream_create(0, &stream));
      good(sim.event_create(0, &event));
      good(sim.pool_get_default(0, &pool));
      for (int round = 0; round < rounds; ++round) {
        void* plain = nullptr;
        void* async = nullptr;
        good(sim.malloc(0, std::size_t(1000 + worker * 512 + round), &plain));
        good(sim.malloc_async(pool, std::size_t(4096 * (round % 7 + 1)), stream, &async));
        good(sim.event_record(event, stream));
        good(sim.stream_wait_event(nullptr, event));
        good(sim.free_async(async, stream));
        good(sim.event_query(event));
        good(sim.free(0, plain));
        if (round % 50 == 0) {
          good(sim.stream_synchronize(0, stream));
        }
      }
      good(sim.event_destroy(0, event));
      good(sim.stream_destroy(0, stream));
    });
  }
  for (std::thread& worker : workers) {
    worker.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sim.calls(driver_call::malloc_async), std::uint64_t{threads} * rounds);
  EXPECT_EQ(sim.calls(driver_call::free), std::uint64_t{threads} * rounds);
  ASSERT_TRUE(succeeded(sim, sim.device_synchronize(0)));
  EXPECT_EQ(sim.bytes_in_use(0), 0u) << "everything freed and trimmed";
}

}  // namespace
}  // namespace streampool::testing
