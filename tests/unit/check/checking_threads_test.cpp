// checking_threads_test.cpp — checking mode shared by threads: four threads, each on its own
// stream, allocate, overrun a few of their blocks, and free, on one allocator (both backends,
// eager sim). Each planted overrun is reported once with its own size, no other report appears,
// and nothing is left. Guards the bookkeeping of live allocations (one mutex, erase before free).
#include <array>
#include <atomic>
#include <random>
#include <thread>

#include "check_test_support.hpp"

namespace streampool::testing {
namespace {

using checking_threads = checking_test;

TEST_P(checking_threads, ThreadsOnTheirOwnStreamsAreCheckedIndependently) {
  alloc_.reset();
  sim_ = std::make_shared<sim_driver>();  // eager: streams complete as work is submitted
  alloc_ = make_allocator(parse_config("backend:" + GetParam().backend + ",debug_checks:True"), sim_);
  constexpr int threads = 4;
  constexpr int ops = 400;
  std::atomic<int> planted{0};
  std::array<std::atomic<int>, threads> planted_by{};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const stream_t s = new_stream();
      std::mt19937 rng(static_cast<std::uint32_t>(t + 1));
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < ops; ++i) {
        if (mine.empty() || rng() % 2 == 0) {
          // Sizes 1000 * (t + 1) + k: a report's size tells which thread's block it was.
          const std::size_t size = 1000 * static_cast<std::size_t>(t + 1) + rng() % 100;
          void* p = alloc_->allocate(size, s);
          if (rng() % 10 == 0) {
            const std::uint8_t stray = 0x00;
            sim_->write_bytes(static_cast<std::uint8_t*>(p) + size, &stray, 1);
            planted.fetch_add(1);
            planted_by[static_cast<std::size_t>(t)].fetch_add(1);
          }
          mine.emplace_back(p, size);
        } else {
          const std::size_t k = rng() % mine.size();
          alloc_->deallocate(mine[k].first);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (const auto& block : mine) alloc_->deallocate(block.first);
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_GT(planted.load(), 20);
  EXPECT_EQ(warnings_scope::containing("buffer overrun").size(), static_cast<std::size_t>(planted.load()));
  EXPECT_EQ(warnings_scope::messages().size(), static_cast<std::size_t>(planted.load()));
  std::array<int, threads> reported_by{};
  for (const std::string& message : warnings_scope::containing("buffer overrun")) {
    const std::size_t at = message.find(" (") + 2;
    const std::size_t size = std::stoul(message.substr(at));
    ASSERT_GE(size, 1000u) << message;
    ++reported_by[size / 1000 - 1];
  }
  for (std::size_t t = 0; t < threads; ++t) EXPECT_EQ(reported_by[t], planted_by[t].load()) << "thread " << t;
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0);
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);
}

INSTANTIATE_TEST_SUITE_P(backends, checking_threads, ::testing::ValuesIn(check_cases()), check_case_name);

}  // namespace
}  // namespace streampool::testing
