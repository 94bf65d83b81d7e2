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

/// A state the plain path passes through: `keep` live, the pair's block `x` live or not.
bool plain_state(const memory_stats& s, std::int64_t x_bytes, std::string& why) {
  const std::int64_t n = s.allocation[all].current;
  const std::int64_t bytes = s.allocated_bytes[all].current;
  const std::int64_t requested = s.requested_bytes[all].current;
  for (const std::int64_t x : {0, 1000000, 999999}) {  // x's request, 0: not live
    if (n == 1 + (x != 0) && bytes == 512 + (x != 0 ? x_bytes : 0) && requested == 500 + x) return true;
  }
  why = "allocation " + std::to_string(n) + ", bytes " + std::to_string(bytes) + ", requested " + std::to_string(requested);
  return false;
}

// Only hot pairs and folds (a record_stream while the pair's block is allocated folds the pairs
// and leaves the lists alone), each of which a reader must see whole: the plain path's own updates are
// several stores that a reader may see in part (Note [Device peaks]), so it stays out.
TEST(front_counters, AReaderOnAnotherThreadSeesOnlyPlainStates) {
  native_env env;
  const stream_t s = env.new_stream();
  void* keep = env.alloc->allocate(500, s, 0);
  const auto keep_bytes = env.stats().allocated_bytes[all].current;
  ASSERT_EQ(keep_bytes, 512);
  void* x0 = env.alloc->allocate(1000000, s, 0);
  const auto x_bytes = env.stats().allocated_bytes[all].current - keep_bytes;
  env.alloc->deallocate(x0);  // parked
  constexpr int pairs = 100000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < pairs; ++i) {
      void* x = env.alloc->allocate(1000000 - static_cast<std::size_t>(i % 2), s, 0);  // the same block
      // Its own stream: no use, only the arena lock, whose settle folds the pairs so far (no
      // device mutex, which stats() takes: a snapshot could not overlap a read).
      if (i % 2 == 0) env.alloc->record_stream(x, s);
      env.alloc->deallocate(x);
    }
    done.store(true);
  });
  std::int64_t last_allocated = 0;
  std::int64_t last_freed = 0;
  std::int64_t last_bytes_freed = 0;
  std::int64_t last_requested_freed = 0;
  int reads = 0;
  std::string failure;
  while ((!done.load() || reads < 100) && failure.empty()) {
    const memory_stats st = env.stats();
    ++reads;
    std::string why;
    if (!plain_state(st, x_bytes, why)) failure = why;
    if (st.allocation[all].allocated - st.allocation[all].freed != st.allocation[all].current) failure = "allocated - freed";
    if (st.allocation[all].allocated < last_allocated) failure = "allocated went back";
    if (st.allocation[all].freed < last_freed) failure = "freed went back";
    if (st.active[all].current != st.allocation[all].current) failure = "active";
    if (st.allocated_bytes[all].freed < last_bytes_freed) failure = "freed bytes went back";
    if (st.requested_bytes[all].freed < last_requested_freed) failure = "freed requested bytes went back";
    last_allocated = st.allocation[all].allocated;
    last_freed = st.allocation[all].freed;
    last_bytes_freed = st.allocated_bytes[all].freed;
    last_requested_freed = st.requested_bytes[all].freed;
  }
  writer.join();
  ASSERT_TRUE(failure.empty()) << "read " << reads << ": " << failure;
  env.alloc->deallocate(keep);
  const memory_stats end = env.stats();
  EXPECT_EQ(end.allocation[all].current, 0);
  EXPECT_EQ(end.allocation[all].allocated, 2 + pairs);
  EXPECT_EQ(end.requested_bytes[all].freed, 500 + static_cast<std::int64_t>(pairs + 1) * 1000000 - pairs / 2);
}

}  // namespace
}  // namespace streampool::test
