// Several threads on several streams (and several threads sharing a stream): no lost memory, no
// double hand-out, statistics back to zero. Run under TSan to check the locking.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

void churn(allocator& a, stream_t stream, stream_t other, unsigned seed, int steps, std::atomic<bool>& failed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<void*, std::size_t>> live;
  for (int i = 0; i < steps; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t sizes[] = {256, 3000, 70000, 900 * KiB, 2 * MiB + 100, 12 * MiB};
      const std::size_t size = sizes[rng() % 6];
      void* p = a.allocate(size, stream);
      // A cheap "no two live blocks overlap" probe: the first byte is owned by one thread only.
      live.emplace_back(p, size);
      if (rng() % 8 == 0) a.record_stream(p, other);
    } else {
      const std::size_t k = rng() % live.size();
      a.deallocate(live[k].first);
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 500 == 0 && rng() % 4 == 0) {
      const memory_stats s = a.stats(0);
      if (s.allocated_bytes[0].current < 0) failed = true;
    }
  }
  for (auto& [p, size] : live) a.deallocate(p);
}

void own_streams_lose_nothing(const char* conf) {
  native_env env(conf);
  constexpr int threads = 8;
  std::vector<stream_t> streams;
  for (int i = 0; i < threads; ++i) streams.push_back(env.new_stream());
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      churn(*env.alloc, streams[static_cast<std::size_t>(t)], streams[static_cast<std::size_t>((t + 1) % threads)],
            1234u + static_cast<unsigned>(t), 4000, failed);
    });
  }
  // Meanwhile: empty_cache, stats and snapshots from another thread.
  std::thread observer([&] {
    for (int i = 0; i < 50; ++i) {
      env.alloc->empty_cache();
      (void)env.alloc->snapshot();
      (void)env.alloc->stats();
      std::this_thread::yield();
    }
  });
  for (auto& th : pool) th.join();
  observer.join();
  EXPECT_FALSE(failed);
  memory_stats s = env.stats();
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  env.alloc->empty_cache();  // also completes blocks still waiting for their events
  s = env.stats();
  EXPECT_EQ(s.requested_bytes[0].current, 0);
  EXPECT_EQ(s.active[0].current, 0);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.segment[0].current, 0);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(s.allocation[0].allocated, s.allocation[0].freed);
}

TEST(multi_thread, ThreadsOnOwnStreamsLoseNothing) { own_streams_lose_nothing(""); }

// One arena for every stream, its order keeper, fences and page moves, under the same churn
// (Note [Cross-stream reuse]; TSan checks the locking).
TEST(multi_thread, ThreadsOnOwnStreamsLoseNothingWithCrossStreamReuse) {
  own_streams_lose_nothing("cross_stream_reuse:True");
  own_streams_lose_nothing("cross_stream_reuse:True,expandable_segments:True");
}

// The locks dropped around cudaMalloc (Note [Releasing the locks around cudaMalloc]): the same
// churn, with every new segment's cudaMalloc made while other threads run on the arena.
TEST(multi_thread, ThreadsOnOwnStreamsLoseNothingWithTheLockReleasedAroundCudaMalloc) {
  own_streams_lose_nothing("release_lock_on_cudamalloc:True");
  own_streams_lose_nothing("release_lock_on_cudamalloc:True,cross_stream_reuse:True");
}

void threads_sharing_a_stream(const char* conf) {
  native_env env(conf);
  const stream_t shared = env.new_stream();
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&, t] { churn(*env.alloc, shared, nullptr, 99u + static_cast<unsigned>(t), 3000, failed); });
  }
  for (auto& th : pool) th.join();
  env.alloc->empty_cache();
  const memory_stats s = env.stats();
  EXPECT_FALSE(failed);
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(multi_thread, ThreadsSharingAStream) {
  threads_sharing_a_stream("");
  threads_sharing_a_stream("release_lock_on_cudamalloc:True");
}

TEST(multi_thread, NoAddressIsHandedOutTwice) {
  native_env env;
  constexpr int threads = 6;
  std::vector<stream_t> streams;
  for (int i = 0; i < threads; ++i) streams.push_back(env.new_stream());
  std::vector<std::vector<void*>> got(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        got[static_cast<std::size_t>(t)].push_back(
            env.alloc->allocate(512 + static_cast<std::size_t>(i % 7) * 512, streams[static_cast<std::size_t>(t % 3)]));
      }
    });
  }
  for (auto& th : pool) th.join();
  std::set<void*> all_ptrs;
  std::size_t count = 0;
  for (const auto& v : got) {
    all_ptrs.insert(v.begin(), v.end());
    count += v.size();
  }
  EXPECT_EQ(all_ptrs.size(), count);
  EXPECT_EQ(env.stats().allocation[0].current, static_cast<std::int64_t>(count));
  for (void* p : all_ptrs) env.alloc->deallocate(p);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

}  // namespace
}  // namespace streampool::test
