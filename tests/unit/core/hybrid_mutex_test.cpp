// hybrid_mutex_test.cpp — core's arena/shard lock (Note [Hybrid mutex in core], Note [Unlock
// without a read-modify-write]): mutual exclusion under heavy contention (a plain counter that
// TSan also watches), sleepers behind a long hold all get the lock, try_lock fails while held.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/hybrid_mutex.hpp"

namespace streampool::core {
namespace {

TEST(hybrid_mutex, ExcludesUnderContention) {
  hybrid_mutex m;
  std::uint64_t counter = 0;  // plain: only the lock orders the increments
  constexpr int threads = 8;
  constexpr int rounds = 20000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard lock(m);
        const std::uint64_t seen = counter;
        if (i % 64 == 0) std::this_thread::yield();  // a preempted holder: waiters go to sleep
        counter = seen + 1;
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(counter, std::uint64_t{threads} * rounds);
}

TEST(hybrid_mutex, SleepersBehindALongHoldAllGetTheLock) {
  hybrid_mutex m;
  std::atomic<int> got{0};
  m.lock();
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&] {
      std::lock_guard lock(m);
      got.fetch_add(1, std::memory_order_relaxed);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the spin: they sleep
  EXPECT_EQ(got.load(), 0) << "nobody passes a held lock";
  EXPECT_FALSE(m.try_lock());
  m.unlock();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(got.load(), 4);
  EXPECT_TRUE(m.try_lock()) << "free again after the last waiter";
  m.unlock();
}

}  // namespace
}  // namespace streampool::core
