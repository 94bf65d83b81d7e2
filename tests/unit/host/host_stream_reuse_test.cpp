// host_stream_reuse_test.cpp — stream-ordered reuse on the sim with non-eager streams (the test
// decides when copies complete): a freed block that copies still read is never handed out again
// before the events of every stream that used it have completed, the allocation path never
// waits, and a slow stream does not hold back blocks of other streams.
#include "host_test_support.hpp"

namespace streampool::test {
namespace {

TEST(host_stream_reuse, NoReuseBeforeTheCopyCompletes) {
  host_env env("", lazy_streams());
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(4096);
  void* a = env.alloc->allocate(4096);
  env.copy_from(a, 4096, stream, device);
  env.alloc->deallocate(a);
  EXPECT_EQ(env.alloc->snapshot().blocks[0].state, host_block_state::pending);
  EXPECT_EQ(env.alloc->stats().allocation.current, 1) << "pending blocks still count as allocations";

  env.sim->reset_counters();
  void* b = env.alloc->allocate(4096);  // same size, copy in flight: a new block
  EXPECT_NE(b, a);
  EXPECT_EQ(env.sim->calls(driver_call::event_synchronize), 0u) << "the allocation path never waits";
  EXPECT_EQ(env.sim->calls(driver_call::stream_synchronize), 0u);
  EXPECT_GE(env.sim->calls(driver_call::event_query), 1u);

  env.sim->complete(stream);
  void* c = env.alloc->allocate(4096);  // the copy is done: a is reused
  EXPECT_EQ(c, a);
  env.alloc->deallocate(b);
  env.alloc->deallocate(c);
  (void)env.sim->free(0, device);
}

TEST(host_stream_reuse, EveryRecordedStreamMustComplete) {
  host_env env("", lazy_streams());
  const stream_t s1 = env.make_stream();
  const stream_t s2 = env.make_stream();
  void* device = env.device_buffer(1024);
  void* a = env.alloc->allocate(1024);
  env.copy_from(a, 1024, s1, device);
  env.copy_from(a, 1024, s2, device);
  env.alloc->record_stream(a, s2);  // twice: one event per stream all the same
  env.alloc->deallocate(a);
  EXPECT_EQ(env.alloc->snapshot().blocks[0].pending_events, 2u);
  env.sim->complete(s1);
  void* b = env.alloc->allocate(1024);
  EXPECT_NE(b, a) << "s2 still reads the block";
  env.sim->complete(s2);
  void* c = env.alloc->allocate(1024);
  EXPECT_EQ(c, a);
  env.alloc->deallocate(b);
  env.alloc->deallocate(c);
  (void)env.sim->free(0, device);
}

TEST(host_stream_reuse, ABlockFreedWithoutStreamsIsReusableAtOnce) {
  host_env env("", lazy_streams());
  void* a = env.alloc->allocate(512);
  env.alloc->deallocate(a);
  EXPECT_EQ(env.alloc->allocate(512), a);
  env.alloc->deallocate(a);
}

TEST(host_stream_reuse, ASlowStreamDoesNotHoldBackAnotherStreamsBlocks) {
  host_env env("", lazy_streams());
  const stream_t slow = env.make_stream();
  const stream_t fast = env.make_stream();
  void* device = env.device_buffer(8192);
  void* held = env.alloc->allocate(8192);
  env.copy_from(held, 8192, slow, device);
  env.alloc->deallocate(held);  // its event is older than the next one
  void* a = env.alloc->allocate(2048);
  env.copy_from(a, 2048, fast, device);
  env.alloc->deallocate(a);
  env.sim->complete(fast);
  EXPECT_EQ(env.alloc->allocate(2048), a) << "per-stream queues: the slow stream's pending event does not block";
  EXPECT_NE(env.alloc->allocate(8192), held);
  env.sim->complete_all();
  env.alloc->empty_cache();
  const host_snapshot snap = env.alloc->snapshot();
  EXPECT_EQ(snap.blocks.size(), 2u);  // the two in use; `held`'s block went back to the driver
  for (const host_block_info& block : snap.blocks) {
    env.alloc->deallocate(reinterpret_cast<void*>(block.address));
  }
  (void)env.sim->free(0, device);
}

TEST(host_stream_reuse, EmptyCacheLooksAtEventsButKeepsPendingBlocks) {
  host_env env("", lazy_streams());
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(4096);
  void* a = env.alloc->allocate(4096);
  env.copy_from(a, 4096, stream, device);
  env.alloc->deallocate(a);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->live_host_allocs(), 1u) << "a pending block is not given back";
  EXPECT_EQ(env.sim->calls(driver_call::host_free), 0u);
  env.sim->complete(stream);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->live_host_allocs(), 0u);
  (void)env.sim->free(0, device);
}

TEST(host_stream_reuse, EventsComeFromAPool) {
  host_env env("", lazy_streams());
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(64);
  for (int i = 0; i < 10; ++i) {
    void* a = env.alloc->allocate(64);
    env.copy_from(a, 64, stream, device);
    env.alloc->deallocate(a);
    env.sim->complete(stream);
  }
  EXPECT_LE(env.sim->calls(driver_call::event_create), 2u);
  EXPECT_EQ(env.sim->calls(driver_call::event_record), 10u);
  (void)env.sim->free(0, device);
}

}  // namespace
}  // namespace streampool::test
