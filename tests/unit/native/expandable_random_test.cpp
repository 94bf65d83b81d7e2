// Expandable segments under random operations: the free-list pieces they rely on (small blocks
// larger than 2 MiB, the in-order successor of the best-fit rule) against a reference set, a
// single-threaded churn with empty_cache whose live blocks must never overlap and whose statistics
// must match the driver, and threads on their own streams with a concurrent empty_cache (for TSan).
// Seeds are printed; STREAMPOOL_TEST_SEED reproduces a run.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "native/free_list.hpp"
#include "unit/native/expandable_test_support.hpp"
#include "support/test_seed.hpp"

namespace streampool::test {
namespace {

using streampool::testing::test_seed;

/// Random inserts and erases of blocks up to 8 MiB (some overflow the small bins); after each
/// step, best fit, the in-order successor of the best fit and the largest block match `ref`.
template <typename List, typename Find>
void check_successors(List& list, std::size_t max_request, Find find, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<native::block> storage(1500);
  for (std::size_t i = 0; i < storage.size(); ++i) {
    storage[i].ptr = 0x100000000 + i * 16 * MiB;
    storage[i].size = (rng() % (8 * MiB / 512) + 1) * 512;
  }
  std::set<std::pair<std::size_t, std::uintptr_t>> ref;
  std::vector<bool> in(storage.size(), false);
  for (int step = 0; step < 20000; ++step) {
    const std::size_t k = rng() % storage.size();
    native::block& b = storage[k];
    if (!in[k]) {
      list.insert(&b);
      ref.insert({b.size, b.ptr});
    } else {
      list.erase(&b);
      ref.erase({b.size, b.ptr});
    }
    in[k] = !in[k];
    if (step % 7 != 0 || ref.empty()) continue;
    const std::size_t want = (rng() % (max_request / 512) + 1) * 512;
    const auto fit = ref.lower_bound({want, 0});
    native::block* found = find(list, want);
    ASSERT_EQ(found == nullptr, fit == ref.end()) << want;
    if (found != nullptr) {
      ASSERT_EQ(std::make_pair(found->size, found->ptr), *fit);
      const auto after = std::next(fit);
      native::block* next = list.next_after(found);
      ASSERT_EQ(next == nullptr, after == ref.end());
      if (next != nullptr) {
        EXPECT_EQ(std::make_pair(next->size, next->ptr), *after);
      }
    }
    EXPECT_EQ(list.largest()->size, ref.rbegin()->first);
  }
}

TEST(expandable_random, FreeListSuccessorsMatchAReferenceOrder) {
  native::small_free_list small;
  check_successors(small, 1 * MiB, [](const native::small_free_list& l, std::size_t s) { return l.find(s); },
                   test_seed());
  native::large_free_list large;
  check_successors(large, 10 * MiB, [](const native::large_free_list& l, std::size_t s) { return l.lower_bound(s); },
                   test_seed());
}

TEST(expandable_random, ChurnNeverOverlapsAndStatisticsMatchTheDriver) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(test_seed()));
  expandable_env env(2 * GiB, "", /*eager=*/false);
  const stream_t streams[] = {env.new_stream(), env.new_stream()};
  struct live_block {
    std::size_t size;
    stream_t stream;
  };
  std::map<std::uintptr_t, live_block> live;
  const std::size_t sizes[] = {512, 3000, 70 * KiB, 900 * KiB, 1 * MiB + 512, 7 * MiB, 21 * MiB, 45 * MiB};
  for (int step = 0; step < 6000; ++step) {
    const unsigned op = rng() % 16;
    if (op < 9 || live.empty()) {
      const std::size_t size = sizes[rng() % 8] + (rng() % 4) * 512;
      const stream_t s = streams[rng() % 2];
      void* p = nullptr;
      try {
        p = env.alloc->allocate(size, s);
      } catch (const out_of_memory&) {
        continue;  // 2 GiB device: possible, and the allocator must keep working
      }
      const auto at = live.lower_bound(addr(p));
      ASSERT_TRUE(at == live.end() || addr(p) + size <= at->first) << "overlaps the next live block";
      ASSERT_TRUE(at == live.begin() || std::prev(at)->first + std::prev(at)->second.size <= addr(p))
          << "overlaps the previous live block";
      live.emplace(addr(p), live_block{size, s});
    } else if (op < 14) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      const stream_t other = it->second.stream == streams[0] ? streams[1] : streams[0];
      if (rng() % 4 == 0) env.alloc->record_stream(reinterpret_cast<void*>(it->first), other);
      env.alloc->deallocate(reinterpret_cast<void*>(it->first));
      live.erase(it);
    } else if (op == 14) {
      env.sim->complete(streams[rng() % 2]);
    } else {
      env.alloc->empty_cache();
      expect_consistent(env);
    }
  }
  for (const auto& [p, b] : live) env.alloc->deallocate(reinterpret_cast<void*>(p));
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  EXPECT_EQ(env.stats().active_bytes[all].current, 0);
  EXPECT_TRUE(env.segments().empty());
}

TEST(expandable_random, ThreadsOnOwnStreamsWithConcurrentEmptyCache) {
  expandable_env env(8 * GiB);
  constexpr int threads = 4;
  std::vector<stream_t> streams;
  for (int i = 0; i < threads; ++i) streams.push_back(env.new_stream());
  const auto seed = static_cast<unsigned>(test_seed());
  std::atomic<bool> done{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(seed + static_cast<unsigned>(t));
      std::vector<void*> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.empty() || (mine.size() < 40 && rng() % 3 != 0)) {  // at most ~1 GiB per thread
          const std::size_t sizes[] = {512, 64 * KiB, 1 * MiB, 3 * MiB, 24 * MiB};
          mine.push_back(env.alloc->allocate(sizes[rng() % 5], streams[static_cast<std::size_t>(t)]));
        } else {
          const std::size_t k = rng() % mine.size();
          env.alloc->deallocate(mine[k]);
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (void* p : mine) env.alloc->deallocate(p);
    });
  }
  std::thread observer([&] {
    while (!done.load()) {
      env.alloc->empty_cache();
      (void)env.alloc->snapshot();
      (void)env.alloc->stats();
      std::this_thread::yield();
    }
  });
  for (auto& w : workers) w.join();
  done = true;
  observer.join();
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().allocated_bytes[all].current, 0);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
}

}  // namespace
}  // namespace streampool::test
