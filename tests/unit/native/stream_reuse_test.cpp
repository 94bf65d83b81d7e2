// Stream-ordered reuse (docs/pytorch-compatibility.md §2.6, §2.9): no reuse across streams, record_stream delays reuse
// until events recorded at free time complete, events come from the pool, and nothing is polled
// when nothing is pending.
#include <gtest/gtest.h>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

sim_options lazy() {
  sim_options o;
  o.eager_completion = false;
  return o;
}

TEST(stream_reuse, BlockFreedOnOneStreamIsNeverGivenToAnother) {
  native_env env;
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->deallocate(p);
  void* q = env.alloc->allocate(4096, b);
  EXPECT_NE(q, p);
  EXPECT_EQ(env.stats().segment[all].current, 2) << "stream b needs its own segment";
  void* r = env.alloc->allocate(4096, a);
  EXPECT_EQ(r, p) << "stream a reuses at once";
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_NE(segs[0].stream, segs[1].stream);
  env.alloc->deallocate(q);
  env.alloc->deallocate(r);
}

TEST(stream_reuse, RecordStreamDelaysReuseUntilEventCompletes) {
  native_env env("", lazy());
  const stream_t side = env.new_stream();
  const stream_t main = env.new_stream();
  void* p = env.alloc->allocate(4096, side);
  env.alloc->record_stream(p, main);
  env.sim->reset_counters();
  env.alloc->deallocate(p);
  EXPECT_EQ(env.calls(driver_call::event_record), 1u);
  EXPECT_EQ(env.native().pending_events(0), 1u);
  memory_stats s = env.stats();
  EXPECT_EQ(s.allocation[all].current, 0);
  EXPECT_EQ(s.active[all].current, 1) << "waiting for the event: still active";
  EXPECT_EQ(env.segments()[0].blocks[0].state, block_state::active_pending_free);

  void* q = env.alloc->allocate(4096, side);
  EXPECT_NE(q, p) << "main has not passed the event";
  EXPECT_GE(env.calls(driver_call::event_query), 1u);

  env.sim->complete(main);
  void* r = env.alloc->allocate(4096, side);
  EXPECT_EQ(r, p) << "reused (same address) once main passed the event";
  EXPECT_EQ(env.native().pending_events(0), 0u);
  s = env.stats();
  EXPECT_EQ(s.active[all].current, 2);
  env.alloc->deallocate(q);
  env.alloc->deallocate(r);
}

TEST(stream_reuse, RecordStreamOfOwnStreamHasNoEffect) {
  native_env env("", lazy());
  const stream_t s1 = env.new_stream();
  void* p = env.alloc->allocate(4096, s1);
  env.alloc->record_stream(p, s1);
  env.sim->reset_counters();
  env.alloc->deallocate(p);
  EXPECT_EQ(env.calls(driver_call::event_record), 0u);
  EXPECT_EQ(env.alloc->allocate(4096, s1), p);
  env.alloc->deallocate(p);
}

TEST(stream_reuse, EventsComeFromThePool) {
  native_env env;
  const stream_t s1 = env.new_stream();
  const stream_t s2 = env.new_stream();
  for (int i = 0; i < 50; ++i) {
    void* p = env.alloc->allocate(4096, s1);
    env.alloc->record_stream(p, s2);
    env.alloc->deallocate(p);
  }
  EXPECT_EQ(env.native().events_created(0), 1u) << "one event, recycled 50 times";
  EXPECT_EQ(env.calls(driver_call::event_create), 1u);
  EXPECT_EQ(env.calls(driver_call::event_record), 50u);
}

TEST(stream_reuse, NoEventQueryWhenNothingIsPending) {
  native_env env("", lazy());
  const stream_t s1 = env.new_stream();
  const stream_t s2 = env.new_stream();
  void* x = env.alloc->allocate(4096, s1);
  env.alloc->record_stream(x, s2);
  env.alloc->deallocate(x);  // one event pending on s1's arena
  env.sim->reset_counters();
  // Cache hits on another stream's arena do not poll s1's events.
  void* warm = env.alloc->allocate(512, s2);
  env.alloc->deallocate(warm);
  const auto before = env.calls(driver_call::event_query);
  for (int i = 0; i < 100; ++i) env.alloc->deallocate(env.alloc->allocate(512, s2));
  EXPECT_EQ(env.calls(driver_call::event_query), before);
  env.sim->complete_all();
  env.alloc->deallocate(env.alloc->allocate(512, s1));  // polls once, then nothing is pending
  EXPECT_EQ(env.native().pending_events(0), 0u);
  env.sim->reset_counters();
  for (int i = 0; i < 100; ++i) env.alloc->deallocate(env.alloc->allocate(512, s1));
  EXPECT_EQ(env.calls(driver_call::event_query), 0u);
}

TEST(stream_reuse, SeveralUsedStreamsNeedAllEvents) {
  native_env env("", lazy());
  const stream_t own = env.new_stream();
  const stream_t u1 = env.new_stream();
  const stream_t u2 = env.new_stream();
  void* p = env.alloc->allocate(1 * MiB + 512, own);
  env.alloc->record_stream(p, u1);
  env.alloc->record_stream(p, u2);
  env.alloc->record_stream(p, u1);  // duplicate: one use
  env.alloc->deallocate(p);
  EXPECT_EQ(env.native().pending_events(0), 2u);
  env.sim->complete(u1);
  void* q = env.alloc->allocate(1 * MiB + 512, own);
  EXPECT_NE(q, p);
  env.sim->complete(u2);
  void* r = env.alloc->allocate(1 * MiB + 512, own);
  EXPECT_EQ(r, p);
  env.alloc->deallocate(q);
  env.alloc->deallocate(r);
}

TEST(stream_reuse, EmptyCacheSynchronizesEvents) {
  native_env env("", lazy());
  const stream_t own = env.new_stream();
  const stream_t other = env.new_stream();
  void* p = env.alloc->allocate(4096, own);
  env.alloc->record_stream(p, other);
  env.alloc->deallocate(p);
  env.sim->reset_counters();
  env.alloc->empty_cache();
  EXPECT_EQ(env.calls(driver_call::event_synchronize), 1u);
  EXPECT_EQ(env.calls(driver_call::free), 1u) << "the segment became wholly free, so it is released";
  const memory_stats s = env.stats();
  EXPECT_EQ(s.active[all].current, 0);
  EXPECT_EQ(s.reserved_bytes[all].current, 0);
  EXPECT_EQ(s.num_sync_all_streams, 1);
}

// docs/pytorch-compatibility.md §6 test_caching_allocator_record_stream_oom: delayed blocks never cause an OOM, the OOM
// path synchronises the events.
TEST(stream_reuse, RecordStreamDelayedBlocksDoNotCauseOom) {
  sim_options o = lazy();
  o.capacity = 1 * GiB;
  native_env env("", o);
  const stream_t own = env.new_stream();
  const stream_t other = env.new_stream();
  for (int i = 0; i < 100; ++i) {
    void* p = env.alloc->allocate(160 * 1000 * 1000, own);
    env.alloc->record_stream(p, other);
    env.alloc->deallocate(p);
  }
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_GT(s.num_alloc_retries, 0);
  EXPECT_LE(s.reserved_bytes[all].current, static_cast<std::int64_t>(1 * GiB));
}

}  // namespace
}  // namespace streampool::test
