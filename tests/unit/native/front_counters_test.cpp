// The front block's share of the counters (Note [Front block counters] in
// src/native/front_share.hpp): a parked block's free and the pairs since the last fold are not in
// the counters but in the share, and no reader may tell. Against a twin allocator with its front
// blocks off: stats read while a block is parked and after many pairs, the fold of N pairs (exactly
// N more allocated and freed), resets while parked, a larger request taken back (its peak), and a
// reader on another thread that must only ever see states the plain path passes through.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

/// Two allocators on identical sim devices, `plain` with its front blocks off.
struct twin {
  native_env fast;
  native_env plain;
  stream_t fast_stream;
  stream_t plain_stream;

  twin() : fast_stream(fast.new_stream()), plain_stream(plain.new_stream()) {
    fast.alloc->deallocate(fast.alloc->allocate(512, fast_stream, 0));  // creates the arenas
    plain.alloc->deallocate(plain.alloc->allocate(512, plain_stream, 0));
    plain.native().set_front_blocks(0, false);
  }
  std::pair<void*, void*> allocate(std::size_t bytes) {
    void* p = fast.alloc->allocate(bytes, fast_stream, 0);
    void* q = plain.alloc->allocate(bytes, plain_stream, 0);
    EXPECT_EQ(addr(p), addr(q));
    return {p, q};
  }
  void deallocate(std::pair<void*, void*> b) {
    fast.alloc->deallocate(b.first);
    plain.alloc->deallocate(b.second);
  }
  void expect_same(const std::string& where) const { ASSERT_EQ(fast.stats().to_json(), plain.stats().to_json()) << where; }
};

TEST(front_counters, ParkedAndPairedStatsMatchThePlainPathAndAFoldAddsExactlyN) {
  twin t;
  const auto keep = t.allocate(3000);  // a live neighbour: the pairs below split a segment
  for (const std::size_t size : {std::size_t{512}, 1 * MiB, 64 * MiB, 3 * MiB + 100}) {
    const std::string where = "size " + std::to_string(size);
    t.fast.alloc->reset_peak_stats(0);
    t.plain.alloc->reset_peak_stats(0);
    auto b = t.allocate(size);
    const memory_stats before = t.fast.stats();
    constexpr int pairs = 50;
    for (int i = 0; i < pairs; ++i) {
      t.deallocate(b);
      t.expect_same(where + " parked, pair " + std::to_string(i));
      b = t.allocate(size - static_cast<std::size_t>(i % 3));  // requests differ, the block does not
      t.expect_same(where + " taken back, pair " + std::to_string(i));
    }
    const memory_stats unfolded = t.fast.stats();
    (void)t.fast.alloc->snapshot();  // takes every arena lock: the fold
    const memory_stats after = t.fast.stats();
    EXPECT_EQ(unfolded.to_json(), after.to_json()) << where << ": a fold changes nothing a reader sees";
    EXPECT_EQ(after.allocation[all].allocated, before.allocation[all].allocated + pairs) << where;
    EXPECT_EQ(after.allocation[all].freed, before.allocation[all].freed + pairs) << where;
    const auto bytes = static_cast<std::int64_t>(pairs) * (before.allocated_bytes[all].current - 3072);
    EXPECT_EQ(after.allocated_bytes[all].freed, before.allocated_bytes[all].freed + bytes) << where;
    t.deallocate(b);
    t.expect_same(where + " freed");
  }
  t.deallocate(keep);
  t.expect_same("all freed");
}

TEST(front_counters, ResetsWhileABlockIsParkedMatchThePlainPath) {
  twin t;
  auto b = t.allocate(4000);
  for (int round = 0; round < 4; ++round) {
    const std::string where = "round " + std::to_string(round);
    t.deallocate(b);  // parked
    t.fast.alloc->reset_peak_stats(0);
    t.plain.alloc->reset_peak_stats(0);
    t.expect_same(where + " peaks reset while parked");
    b = t.allocate(4096);  // the same block, a larger request: its peak rises at the take-back
    t.expect_same(where + " larger request taken back");
    t.deallocate(b);
    t.fast.alloc->reset_accumulated_stats(0);
    t.plain.alloc->reset_accumulated_stats(0);
    t.expect_same(where + " accumulated reset while parked");
    b = t.allocate(4000);
    for (int i = 0; i < 10; ++i) {
      t.deallocate(b);
      b = t.allocate(4000);
    }
    t.expect_same(where + " pairs after the resets");
  }
  t.deallocate(b);
  t.expect_same("freed");
}

TEST(front_counters, APeakThatOnlyTheParkRaisesIsKept) {
  twin t;
  const auto keep = t.allocate(512);
  auto b = t.allocate(512);  // between `keep` and the segment's free rest: its free raises inactive_split_bytes
  t.fast.alloc->reset_peak_stats(0);
  t.plain.alloc->reset_peak_stats(0);
  EXPECT_EQ(t.fast.stats().inactive_split_bytes[all].peak, static_cast<std::int64_t>(2 * MiB - 1024));
  t.deallocate(b);
  b = t.allocate(512);  // no stats() read while parked, which would raise the peak to the current sum
  t.expect_same("taken back");
  EXPECT_EQ(t.fast.stats().inactive_split_bytes[all].peak, static_cast<std::int64_t>(2 * MiB - 512));
  t.deallocate(b);
  t.expect_same("parked");
  t.deallocate(keep);
  t.expect_same("freed");
}

/// A state the plain path passes through, for live blocks among `keep` (always), `x` and `y`.
bool plain_state(const memory_stats& s, std::int64_t x_bytes, std::int64_t y_bytes, std::string& why) {
  const std::int64_t n = s.allocation[all].current;
  const std::int64_t bytes = s.allocated_bytes[all].current;
  const std::int64_t requested = s.requested_bytes[all].current;
  for (int mask = 0; mask < 4; ++mask) {
    const bool x = (mask & 1) != 0;
    const bool y = (mask & 2) != 0;
    if (n == 1 + x + y && bytes == 512 + (x ? x_bytes : 0) + (y ? y_bytes : 0) &&
        requested == 500 + (x ? 1000000 : 0) + (y ? 2000000 : 0)) {
      return true;
    }
  }
  why = "allocation " + std::to_string(n) + ", bytes " + std::to_string(bytes) + ", requested " + std::to_string(requested);
  return false;
}

TEST(front_counters, AReaderOnAnotherThreadSeesOnlyPlainStates) {
  native_env env;
  const stream_t s = env.new_stream();
  void* keep = env.alloc->allocate(500, s, 0);
  const auto keep_bytes = env.stats().allocated_bytes[all].current;
  void* x0 = env.alloc->allocate(1000000, s, 0);
  const auto x_bytes = env.stats().allocated_bytes[all].current - keep_bytes;
  env.alloc->deallocate(x0);
  void* y0 = env.alloc->allocate(2000000, s, 0);
  const auto y_bytes = env.stats().allocated_bytes[all].current - keep_bytes;
  env.alloc->deallocate(y0);
  ASSERT_EQ(keep_bytes, 512);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 40000; ++i) {
      void* x = env.alloc->allocate(1000000, s, 0);
      env.alloc->deallocate(x);
      if (i % 50 == 0) {  // a plain pair of another size: settles and folds
        void* y = env.alloc->allocate(2000000, s, 0);
        env.alloc->deallocate(y);
      }
    }
    done.store(true);
  });
  std::int64_t last_allocated = 0;
  std::int64_t last_freed = 0;
  int reads = 0;
  std::string failure;
  while ((!done.load() || reads < 100) && failure.empty()) {
    const memory_stats st = env.stats();
    ++reads;
    std::string why;
    if (!plain_state(st, x_bytes, y_bytes, why)) failure = why;
    if (st.allocation[all].allocated - st.allocation[all].freed != st.allocation[all].current) failure = "allocated - freed";
    if (st.allocation[all].allocated < last_allocated) failure = "allocated went back";
    if (st.allocation[all].freed < last_freed) failure = "freed went back";
    if (st.active[all].current != st.allocation[all].current) failure = "active";
    last_allocated = st.allocation[all].allocated;
    last_freed = st.allocation[all].freed;
  }
  writer.join();
  ASSERT_TRUE(failure.empty()) << "read " << reads << ": " << failure;
  env.alloc->deallocate(keep);
  const memory_stats end = env.stats();
  EXPECT_EQ(end.allocation[all].current, 0);
  EXPECT_EQ(end.allocation[all].allocated, 3 + 40000 + 800);
}

}  // namespace
}  // namespace streampool::test
