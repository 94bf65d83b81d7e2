// No host heap allocation on the hot path in steady state: this binary's operator new counts
// calls while a test window is open.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "unit/native/native_test_support.hpp"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> news{0};
}  // namespace

// GCC 12 flags free() in a replaced operator delete once library code is inlined around it; the
// pairing new→malloc / delete→free is the standard way to replace them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace streampool::test {
namespace {

TEST(host_allocation, SteadyStateHotPathAllocatesNothing) {
  native_env env;
  const stream_t s1 = env.new_stream();
  const stream_t s2 = env.new_stream();
  auto round = [&] {
    void* small_block = env.alloc->allocate(700, s1);
    void* mid = env.alloc->allocate(3 * MiB, s1);
    void* used = env.alloc->allocate(4096, s1);
    env.alloc->record_stream(used, s2);  // an event from the pool, a queue entry
    env.alloc->deallocate(mid);
    env.alloc->deallocate(small_block);
    env.alloc->deallocate(used);
  };
  for (int i = 0; i < 100; ++i) round();  // warm-up: block objects, maps, queues reach their size
  news = 0;
  counting = true;
  for (int i = 0; i < 1000; ++i) round();
  counting = false;
  EXPECT_EQ(news.load(), 0);
  EXPECT_GT(env.calls(driver_call::event_record), 1000u) << "the window did exercise the event path";
}

}  // namespace
}  // namespace streampool::test
