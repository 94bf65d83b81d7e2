// Snapshots (docs/pytorch-compatibility.md §2.15) agree with stats (the §2.14 invariant), and the trace ring records the
// allocator's actions in order.
#include <gtest/gtest.h>

#include <random>

#include "unit/native/native_test_support.hpp"
#include "support/test_seed.hpp"

namespace streampool::test {
namespace {

/// docs/pytorch-compatibility.md §2.14 invariant (test_cuda_multigpu._check_memory_stat_consistency).
void expect_consistent(const allocator& a, int device = 0) {
  const memory_stats s = a.stats(device);
  std::int64_t segments[3] = {}, reserved[3] = {}, allocated[3] = {}, active[3] = {}, active_bytes[3] = {};
  std::int64_t requested[3] = {}, inactive_split[3] = {}, inactive_split_bytes[3] = {}, allocations[3] = {};
  for (const segment_info& seg : a.snapshot().segments) {
    if (seg.device != device) continue;
    for (const std::size_t k : {std::size_t{0}, seg.is_large ? std::size_t{2} : std::size_t{1}}) {
      segments[k] += 1;
      reserved[k] += static_cast<std::int64_t>(seg.total_size);
      allocated[k] += static_cast<std::int64_t>(seg.allocated_size);
      active_bytes[k] += static_cast<std::int64_t>(seg.active_size);
      requested[k] += static_cast<std::int64_t>(seg.requested_size);
      for (const block_info& b : seg.blocks) {
        if (b.state == block_state::active_allocated) allocations[k] += 1;
        if (b.state != block_state::inactive) active[k] += 1;
        if (b.state == block_state::inactive && seg.blocks.size() > 1) {
          inactive_split[k] += 1;
          inactive_split_bytes[k] += static_cast<std::int64_t>(b.size);
        }
      }
    }
  }
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(s.segment[k].current, segments[k]) << k;
    EXPECT_EQ(s.reserved_bytes[k].current, reserved[k]) << k;
    EXPECT_EQ(s.allocated_bytes[k].current, allocated[k]) << k;
    EXPECT_EQ(s.active_bytes[k].current, active_bytes[k]) << k;
    EXPECT_EQ(s.requested_bytes[k].current, requested[k]) << k;
    EXPECT_EQ(s.active[k].current, active[k]) << k;
    EXPECT_EQ(s.allocation[k].current, allocations[k]) << k;
    EXPECT_EQ(s.inactive_split[k].current, inactive_split[k]) << k;
    EXPECT_EQ(s.inactive_split_bytes[k].current, inactive_split_bytes[k]) << k;
  }
}

TEST(snapshot, SegmentsSortedAndBlocksTileThem) {
  native_env env;
  const stream_t s1 = env.new_stream();
  void* a = env.alloc->allocate(3 * MiB);
  void* b = env.alloc->allocate(100, s1);
  void* c = env.alloc->allocate(700);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 3u);
  for (std::size_t i = 1; i < segs.size(); ++i) EXPECT_LT(segs[i - 1].address, segs[i].address);
  for (const segment_info& seg : segs) {
    std::uintptr_t next = seg.address;
    std::size_t sum = 0;
    for (const block_info& blk : seg.blocks) {
      EXPECT_EQ(blk.address, next);
      next += blk.size;
      sum += blk.size;
    }
    EXPECT_EQ(sum, seg.total_size);
  }
  const auto& b_seg = *std::find_if(segs.begin(), segs.end(), [&](const segment_info& s) { return s.stream == s1; });
  EXPECT_EQ(b_seg.blocks[0].address, addr(b));
  EXPECT_EQ(b_seg.blocks[0].requested_size, 100u);
  EXPECT_EQ(b_seg.requested_size, 100u);
  EXPECT_FALSE(b_seg.is_large);
  expect_consistent(*env.alloc);
  for (void* p : {a, b, c}) env.alloc->deallocate(p);
  expect_consistent(*env.alloc);
}

TEST(snapshot, ConsistentWithStatsUnderRandomWorkload) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(streampool::testing::test_seed()));
  sim_options o;
  o.eager_completion = false;
  native_env env("max_split_size_mb:40", o);
  const stream_t streams[] = {nullptr, env.new_stream(), env.new_stream()};
  std::vector<void*> live;
  for (int step = 0; step < 3000; ++step) {
    const unsigned op = rng() % 10;
    if (op < 5 || live.empty()) {
      const std::size_t sizes[] = {100, 4000, 600 * KiB, 3 * MiB, 11 * MiB, 45 * MiB};
      const std::size_t size = sizes[rng() % 6] + rng() % 1000;
      live.push_back(env.alloc->allocate(size, streams[rng() % 3]));
      if (rng() % 4 == 0) env.alloc->record_stream(live.back(), streams[rng() % 3]);
    } else if (op < 9) {
      const std::size_t i = rng() % live.size();
      env.alloc->deallocate(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (rng() % 2 == 0) {
      env.sim->complete(streams[rng() % 3]);
    } else {
      env.alloc->empty_cache();
    }
    if (step % 250 == 0) expect_consistent(*env.alloc);
  }
  for (void* p : live) env.alloc->deallocate(p);
  expect_consistent(*env.alloc);
  env.alloc->empty_cache();
  const memory_stats s = env.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.active[0].current, 0);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(snapshot, PendingFreeState) {
  sim_options o;
  o.eager_completion = false;
  native_env env("", o);
  const stream_t s1 = env.new_stream();
  void* p = env.alloc->allocate(4096);
  env.alloc->record_stream(p, s1);
  env.alloc->deallocate(p);
  const auto segs = env.segments();
  EXPECT_EQ(segs[0].blocks[0].state, block_state::active_pending_free);
  EXPECT_EQ(segs[0].active_size, 4096u);
  EXPECT_EQ(segs[0].allocated_size, 0u);
  expect_consistent(*env.alloc);
}

TEST(trace, ActionsInOrder) {
  sim_options o;
  o.eager_completion = false;
  native_env env("", o);
  const stream_t s1 = env.new_stream();
  EXPECT_TRUE(env.alloc->trace().empty()) << "off by default";
  env.alloc->record_history(true);
  void* p = env.alloc->allocate(1000);
  void* q = env.alloc->allocate(2000);
  env.alloc->record_stream(q, s1);
  env.alloc->deallocate(p);
  env.alloc->deallocate(q);
  env.sim->complete(s1);
  env.alloc->empty_cache();
  const auto t = env.alloc->trace();
  const std::vector<trace_action> expected = {
      trace_action::segment_alloc, trace_action::alloc,          trace_action::alloc,
      trace_action::free_requested, trace_action::free_completed, trace_action::free_requested,
      trace_action::free_completed, trace_action::segment_free};
  ASSERT_EQ(t.size(), expected.size());
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].action, expected[i]) << i;
  EXPECT_EQ(t[0].size, 2 * MiB);
  EXPECT_EQ(t[1].address, addr(p));
  EXPECT_EQ(t[1].size, 1000u) << "alloc entries carry the requested size";
  EXPECT_EQ(t[6].address, addr(q));
  EXPECT_EQ(t[7].action, trace_action::segment_free);
  for (std::size_t i = 1; i < t.size(); ++i) EXPECT_LE(t[i - 1].time_us, t[i].time_us);
  // A snapshot carries the trace; its last entry is the last allocator action.
  const memory_snapshot snap = env.alloc->snapshot();
  ASSERT_EQ(snap.trace.size(), expected.size());
  EXPECT_EQ(snap.trace.back().action, trace_action::segment_free);
  EXPECT_EQ(env.alloc->trace().back().action, trace_action::snapshot) << "recorded after the copy";
  env.alloc->record_history(false);
  EXPECT_TRUE(env.alloc->trace().empty()) << "disabling clears";
}

TEST(trace, RingKeepsTheNewestEntries) {
  native_env env;
  env.alloc->record_history(true, 4);
  for (int i = 0; i < 10; ++i) env.alloc->deallocate(env.alloc->allocate(static_cast<std::size_t>(512 * (i + 1))));
  const auto t = env.alloc->trace();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[2].action, trace_action::free_requested);
  EXPECT_EQ(t[2].size, 5120u);
  EXPECT_EQ(t[3].action, trace_action::free_completed);
}

}  // namespace
}  // namespace streampool::test
