// async_concurrency_test.cpp — several devices (a pool, statistics and trim per device; frees find
// the device from the pointer) and several threads (per-thread streams, frees of other threads'
// pointers, concurrent statistics) on the cudaMallocAsync backend. Seeded randomness: set
// STREAMPOOL_TEST_SEED to reproduce a run.
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "async_test_support.hpp"
#include "support/test_seed.hpp"

namespace streampool::testing {
namespace {

class async_multi_device : public async_fixture {
 protected:
  void SetUp() override {
    sim_options options;
    options.device_count = 2;
    make(options);
  }
};

TEST_F(async_multi_device, EachDeviceHasItsOwnPoolAndStatistics) {
  const stream_t stream1 = new_stream(1);
  void* on0 = alloc_->allocate(1000, nullptr, 0);
  void* on1 = alloc_->allocate(3 * mib, stream1, 1);
  EXPECT_NE(pool_of(0), pool_of(1));
  EXPECT_EQ(alloc_->stats(0).allocated_bytes[0].current, 1024);
  EXPECT_EQ(alloc_->stats(1).allocated_bytes[0].current, static_cast<std::int64_t>(3 * mib));
  EXPECT_GT(sim_->bytes_in_use(1), 0u);
  alloc_->deallocate(on1);  // the pointer alone says which device
  EXPECT_EQ(alloc_->stats(1).allocation[0].current, 0);
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 1);
  alloc_->deallocate(on0);
  alloc_->empty_cache();
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);
  EXPECT_EQ(sim_->bytes_in_use(1), 0u);
}

TEST_F(async_multi_device, CurrentDeviceAndPerDeviceFraction) {
  ASSERT_TRUE(sim_->set_device(1).ok());
  void* p = alloc_->allocate(100);  // current device: 1
  EXPECT_EQ(alloc_->stats(1).allocation[0].current, 1);
  EXPECT_EQ(backend().initialized_device(0), nullptr);
  alloc_->set_memory_fraction(0.0, 0);
  EXPECT_THROW((void)alloc_->allocate(100, nullptr, 0), out_of_memory);
  void* q = alloc_->allocate(100, nullptr, 1);  // device 1 is not capped
  EXPECT_DOUBLE_EQ(alloc_->memory_fraction(1), 1.0);
  alloc_->deallocate(p);
  alloc_->deallocate(q);
  ASSERT_TRUE(sim_->set_device(0).ok());
}

TEST_F(async_multi_device, CapturesArePerDevice) {
  void* on0 = alloc_->allocate(100, nullptr, 0);
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [](stream_t) { return false; }, 1);
  const auto frees = sim_->calls(driver_call::free_async);
  alloc_->deallocate(on0);  // device 0 has no capture underway: freed at once
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees + 1);
  alloc_->end_allocate_to_pool(pool, 1);
}

using async_threads = async_fixture;

TEST_F(async_threads, ManyThreadsAllocateAndFree) {
  const std::uint64_t seed = test_seed();
  constexpr int threads = 8;
  constexpr int rounds = 2000;
  std::vector<stream_t> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(new_stream());
  std::atomic<bool> stop_reader{false};
  std::atomic<int> failures{0};
  // Pointers handed between threads: each thread frees what its neighbour allocated.
  std::vector<std::vector<void*>> handoff(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
      std::uniform_int_distribution<std::size_t> size(1, 4 * mib);
      std::vector<void*> mine;
      for (int i = 0; i < rounds; ++i) {
        try {
          void* p = alloc_->allocate(size(rng), streams[static_cast<std::size_t>(t)]);
          if (i % 7 == 0) alloc_->record_stream(p, streams[static_cast<std::size_t>((t + 1) % threads)]);
          mine.push_back(p);
          if (mine.size() > 16) {
            alloc_->deallocate(mine.front());
            mine.erase(mine.begin());
          }
        } catch (...) {
          failures.fetch_add(1);
        }
      }
      handoff[static_cast<std::size_t>(t)] = std::move(mine);
    });
  }
  std::thread reader([&] {
    while (!stop_reader.load()) {
      const memory_stats s = alloc_->stats(0);
      if (s.allocation[0].current < 0 || s.allocated_bytes[0].current < 0) failures.fetch_add(1);
      (void)alloc_->snapshot();
    }
  });
  for (std::thread& worker : workers) worker.join();
  std::vector<std::thread> freers;
  for (int t = 0; t < threads; ++t) {
    freers.emplace_back([&, t] {
      for (void* p : handoff[static_cast<std::size_t>((t + 1) % threads)]) alloc_->deallocate(p);
    });
  }
  for (std::thread& freer : freers) freer.join();
  stop_reader.store(true);
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.active_bytes[0].current, 0);
  EXPECT_EQ(s.num_device_alloc, threads * rounds);
  EXPECT_EQ(s.num_device_free, threads * rounds);
  EXPECT_EQ(s.allocation[0].allocated, threads * rounds);
  EXPECT_TRUE(alloc_->snapshot().segments.empty());
  alloc_->empty_cache();
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);
}

TEST_F(async_threads, FirstUseFromManyThreadsSetsUpOnce) {
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&] { alloc_->deallocate(alloc_->allocate(100)); });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(sim_->calls(driver_call::pool_get_default), 1u);
  EXPECT_EQ(alloc_->stats(0).num_device_alloc, 8);
}

}  // namespace
}  // namespace streampool::testing
