// cross_stream_reuse:True on the sim (Note [Cross-stream reuse] in src/native/stream_order.hpp):
// a free block serves another stream after a fence wait or once its work is seen complete, never
// during a capture; free pages move instead of raising reserved memory; the counters, the trace
// and the snapshot show it; failures hand nothing out; without the key nothing changes.
#include <gtest/gtest.h>

#include "unit/native/cross_stream_test_support.hpp"

namespace streampool::test {
namespace {

TEST(cross_stream, FreeBlockServesAnotherStreamAfterAFenceWait) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->deallocate(p);
  env.sim->reset_counters();
  void* q = env.alloc->allocate(4096, b);
  EXPECT_EQ(q, p) << "the block freed on a serves b";
  EXPECT_EQ(env.calls(driver_call::event_record), 1u) << "one fence recorded on a";
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 1u) << "b waits for it (a's work is not complete)";
  EXPECT_EQ(env.calls(driver_call::stream_synchronize) + env.calls(driver_call::device_synchronize) +
                env.calls(driver_call::event_synchronize),
            0u)
      << "the host never waits on the allocation path";
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_cross_stream_reuses, 1);
  EXPECT_EQ(s.num_cross_stream_waits, 1);
  EXPECT_EQ(s.num_cross_stream_fences, 1);
  EXPECT_EQ(s.segment[all].current, 1) << "one segment for both streams";
  env.alloc->deallocate(q);
}

TEST(cross_stream, CompletedWorkNeedsNoWait) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  const stream_t c = env.new_stream();
  void* p1 = env.alloc->allocate(1 * MiB, a);
  void* p2 = env.alloc->allocate(1 * MiB, a);
  env.alloc->deallocate(p1);
  env.alloc->deallocate(p2);
  void* q1 = env.alloc->allocate(1 * MiB, b);  // records a's fence; b waits for it
  EXPECT_EQ(env.stats().num_cross_stream_waits, 1);
  env.sim->complete(a);  // the GPU passes the fence
  env.sim->reset_counters();
  void* q2 = env.alloc->allocate(1 * MiB, c);  // freed before that fence, too
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 0u) << "the fence's query shows a's work done";
  EXPECT_EQ(env.calls(driver_call::event_record), 0u) << "the existing fence covers it";
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 2);
  EXPECT_EQ(env.stats().num_cross_stream_waits, 1);
  env.alloc->deallocate(q1);
  env.alloc->deallocate(q2);
}

TEST(cross_stream, AStreamWaitsForAFenceOnlyOnce) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(env.alloc->allocate(1 * MiB, a));
  for (void* p : blocks) env.alloc->deallocate(p);
  env.sim->reset_counters();
  std::vector<void*> taken;
  for (int i = 0; i < 8; ++i) taken.push_back(env.alloc->allocate(1 * MiB, b));
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 1u) << "one fence covers every free made before it";
  EXPECT_EQ(env.calls(driver_call::event_record), 1u);
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 8);
  for (void* p : taken) env.alloc->deallocate(p);
}

TEST(cross_stream, SameStreamHitNeedsNothing) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->deallocate(p);
  env.sim->reset_counters();
  EXPECT_EQ(env.alloc->allocate(4096, a), p);
  EXPECT_EQ(env.calls(driver_call::event_record) + env.calls(driver_call::stream_wait_event) +
                env.calls(driver_call::event_query),
            0u);
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 0);
  env.alloc->deallocate(p);
}

TEST(cross_stream, WithoutTheKeyStreamsKeepTheirOwnMemory) {
  native_env env("", lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->deallocate(p);
  void* q = env.alloc->allocate(4096, b);
  EXPECT_NE(q, p) << "PyTorch's rule stays the default";
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 0);
  env.alloc->deallocate(q);
}

TEST(cross_stream, MergedFreeBlocksCarryEveryStreamTheyWereUsedOn) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  const stream_t c = env.new_stream();
  void* big = env.alloc->allocate(1 * MiB, a);  // one 2 MiB small-pool segment
  env.alloc->deallocate(big);
  void* pa = env.alloc->allocate(256 * KiB, a);
  void* pb = env.alloc->allocate(256 * KiB, b);
  ASSERT_EQ(addr(pb), addr(pa) + 256 * KiB) << "b took the next piece";
  env.alloc->deallocate(pa);
  env.alloc->deallocate(pb);  // merges with a's piece: the free block names a and b
  env.sim->reset_counters();
  void* pc = env.alloc->allocate(512 * KiB, c);
  EXPECT_EQ(pc, pa);
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 2u) << "c waits for a and for b";
  env.alloc->deallocate(pc);
}

TEST(cross_stream, RecordStreamStillDelaysReuse) {
  native_env env(policy, lazy());
  const stream_t side = env.new_stream();
  const stream_t main = env.new_stream();
  void* p = env.alloc->allocate(4096, side);
  env.alloc->record_stream(p, main);
  env.alloc->deallocate(p);
  void* q = env.alloc->allocate(4096, main);
  EXPECT_NE(q, p) << "main has not passed the event recorded at free";
  env.sim->complete(main);
  void* r = env.alloc->allocate(4096, main);
  EXPECT_EQ(r, p) << "after the event the block serves main, ordered after side by a fence";
  EXPECT_GE(env.stats().num_cross_stream_reuses, 1);
  env.alloc->deallocate(q);
  env.alloc->deallocate(r);
}

TEST(cross_stream, NoEventWorkDuringACapture) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->deallocate(p);
  env.alloc->begin_allocate_to_pool(mempool_id{1, 0}, [a](stream_t s) { return s == a; }, 0);
  env.sim->reset_counters();
  void* q = env.alloc->allocate(4096, b);  // b is not captured: the default pool, shared arena
  EXPECT_NE(q, p) << "reusing a's block would need an event while a capture is underway";
  EXPECT_EQ(env.calls(driver_call::event_record) + env.calls(driver_call::stream_wait_event), 0u);
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 0);
  env.alloc->end_allocate_to_pool(mempool_id{1, 0}, 0);
  env.alloc->release_pool(mempool_id{1, 0}, 0);
  env.alloc->deallocate(q);
  const stream_t c = env.new_stream();
  void* r = env.alloc->allocate(4096, c);  // every free block was last used by a or b
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 1) << "after the capture free blocks are shared again";
  EXPECT_EQ(env.stats().segment[all].current, 2);
  env.alloc->deallocate(r);
}

TEST(cross_stream, AFailedFenceHandsNothingOut) {
  native_env env(policy, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->deallocate(p);
  env.sim->fail_next(driver_call::event_record, 1, status::other);
  EXPECT_THROW((void)env.alloc->allocate(4096, b), cuda_error);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.allocation[all].current, 0) << "nothing allocated";
  EXPECT_EQ(s.num_cross_stream_reuses, 0);
  void* q = env.alloc->allocate(4096, b);
  EXPECT_EQ(q, p) << "the retry succeeds with the same block";
  env.alloc->deallocate(q);

  env.sim->fail_next(driver_call::stream_wait_event, 1, status::other);
  EXPECT_THROW((void)env.alloc->allocate(4096, a), cuda_error) << "q was freed on b: a must wait for b";
  EXPECT_EQ(env.stats().allocation[all].current, 0);
  void* r = env.alloc->allocate(4096, a);
  EXPECT_EQ(r, p);
  env.alloc->deallocate(r);
}

TEST(cross_stream, SixtyFifthStreamGetsAnArenaOfItsOwn) {
  native_env env(policy, lazy());
  std::vector<stream_t> streams;
  for (int i = 0; i < 65; ++i) streams.push_back(env.new_stream());
  std::vector<void*> blocks;
  for (stream_t s : streams) blocks.push_back(env.alloc->allocate(4096, s));
  for (void* p : blocks) env.alloc->deallocate(p);
  EXPECT_EQ(env.stats().segment[all].current, 2) << "64 streams share a segment, the 65th has its own";
  void* q = env.alloc->allocate(4096, streams[64]);
  EXPECT_EQ(q, blocks[64]) << "the 65th stream keeps PyTorch's rule";
  env.alloc->deallocate(q);
}

TEST(cross_stream, FreePagesMoveInsteadOfRaisingReserved) {
  native_env env(policy_expandable, lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  // a: 3 x 10 MiB; free the middle one: a 10 MiB hole between live blocks.
  void* x = env.alloc->allocate(10 * MiB, a);
  void* y = env.alloc->allocate(10 * MiB, a);
  void* z = env.alloc->allocate(10 * MiB, a);
  EXPECT_TRUE(env.sim->use(a, y, 10 * MiB));
  env.alloc->deallocate(y);
  const std::int64_t peak = env.stats().reserved_bytes[all].peak;
  EXPECT_EQ(peak, 30 * static_cast<std::int64_t>(MiB)) << "2 MiB pages: exactly what was asked";
  // b asks for more than the hole: without moving pages reserved would rise to 42 MiB.
  void* w = env.alloc->allocate(12 * MiB, b);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.reserved_bytes[all].peak, 32 * static_cast<std::int64_t>(MiB))
      << "the hole's 10 MiB moved: 20 live + 12 new";
  EXPECT_EQ(s.num_moved_pages, 5);
  EXPECT_EQ(s.num_fence_host_waits, 0) << "a's kernel may still use them: moved without a host wait (moved_pages_test)";
  EXPECT_TRUE(env.sim->use(b, w, 12 * MiB)) << "b is ordered after a's use of the moved pages";
  for (void* p : {x, z, w}) env.alloc->deallocate(p);
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
}

TEST(cross_stream, AGrowthRecordsACheckpointFenceOnStreamsThatFreed) {
  freed_middle f;
  native_env& env = f.env;
  env.sim->reset_counters();
  void* s = env.alloc->allocate(4 * KiB, f.b);  // a small-pool growth: 32 of 40 MiB, no move
  EXPECT_EQ(env.calls(driver_call::event_record), 1u) << "one checkpoint, on a (b freed nothing)";
  EXPECT_EQ(env.stats().num_moved_pages, 0);
  env.sim->reset_counters();
  void* t = env.alloc->allocate(4 * KiB, f.b);  // a cache hit
  void* u = env.alloc->allocate(3 * MiB, f.b);  // growth again: a freed nothing since its checkpoint
  EXPECT_EQ(env.calls(driver_call::event_record), 0u) << "the checkpoint still covers a's frees";
  for (void* p : {s, t, u, f.x, f.z}) env.alloc->deallocate(p);
}

TEST(cross_stream, OrderingAMovedPagesUserTakesTheCheckpointNotANewFence) {
  freed_middle f;
  native_env& env = f.env;
  void* s = env.alloc->allocate(4 * KiB, f.b);  // checkpoint on a, covering y's free
  env.sim->reset_counters();
  void* w = env.alloc->allocate(14 * MiB, f.b);  // 32 + 14 > 40: y's pages move
  EXPECT_GT(env.stats().num_moved_pages, 0);
  EXPECT_EQ(env.calls(driver_call::event_record), 0u)
      << "b waits for the checkpoint recorded after y's free, not for a fence after everything a was given since";
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 1u);
  EXPECT_EQ(env.stats().reserved_bytes[all].peak, 40 * static_cast<std::int64_t>(MiB)) << "the peak did not rise";
  for (void* p : {s, w, f.x, f.z}) env.alloc->deallocate(p);
}

TEST(cross_stream, ARefusedCheckpointIsSkipped) {
  freed_middle f;
  native_env& env = f.env;
  const memory_stats before = env.stats();  // empty_cache recorded and waited for fences
  env.sim->fail_next(driver_call::event_record, 1, status::other);
  void* s = env.alloc->allocate(4 * KiB, f.b);  // the checkpoint on a fails: nothing else does
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(env.stats().num_cross_stream_fences, before.num_cross_stream_fences);
  void* w = env.alloc->allocate(14 * MiB, f.b);  // ordering b after a records the fence it needs
  EXPECT_EQ(env.stats().num_cross_stream_fences, before.num_cross_stream_fences + 1);
  EXPECT_EQ(env.stats().num_fence_host_waits, before.num_fence_host_waits) << "no host wait";
  EXPECT_EQ(env.sim->hazard_violations(), 0u);
  for (void* p : {s, w, f.x, f.z}) env.alloc->deallocate(p);
}

/// Stream a holds 3 MiB of two 2 MiB pages and freed the last MiB: a free block at the edge of
/// the mapped range, last used on a, that the next growth merges.
struct free_edge : two_streams {
  void* x = env.alloc->allocate(3 * MiB, a);
  void* y = env.alloc->allocate(1 * MiB, a);
  free_edge() { env.alloc->deallocate(y); }
};

TEST(cross_stream, GrowthNextToAnotherStreamsFreeBytesIsOrdered) {
  free_edge f;
  native_env& env = f.env;
  ASSERT_EQ(addr(f.y), addr(f.x) + 3 * MiB);
  env.sim->reset_counters();
  void* z = env.alloc->allocate(2 * MiB, f.b);  // no fit: the growth starts at y's free MiB
  EXPECT_EQ(z, f.y) << "the growable run begins with the free block before the unmapped range";
  EXPECT_EQ(env.calls(driver_call::stream_wait_event), 1u) << "b waits for a: y's bytes are in z";
  EXPECT_EQ(env.stats().num_cross_stream_reuses, 1);
  env.alloc->deallocate(z);
  env.alloc->deallocate(f.x);
}

TEST(cross_stream, DuringACaptureSuchAGrowthTakesAFreshReservation) {
  free_edge f;
  native_env& env = f.env;
  const stream_t a = f.a;
  const stream_t b = f.b;
  void* x = f.x;
  void* y = f.y;
  env.alloc->begin_allocate_to_pool(mempool_id{1, 0}, [a](stream_t s) { return s == a; }, 0);
  env.sim->reset_counters();
  void* z = env.alloc->allocate(2 * MiB, b);  // b is not captured: the shared arena
  EXPECT_NE(z, y) << "no event may be recorded during the capture, so not next to y";
  EXPECT_EQ(env.calls(driver_call::event_record) + env.calls(driver_call::stream_wait_event), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 1u) << "a fresh reservation";
  env.alloc->end_allocate_to_pool(mempool_id{1, 0}, 0);
  env.alloc->release_pool(mempool_id{1, 0}, 0);
  env.alloc->deallocate(z);
  env.alloc->deallocate(x);
}

TEST(cross_stream, TraceAndSnapshotNameEachBlocksStream) {
  native_env env(policy, lazy());
  env.alloc->record_history(true, 100);
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  void* q = env.alloc->allocate(4096, b);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u) << "one shared segment";
  ASSERT_GE(segs[0].blocks.size(), 2u);
  EXPECT_EQ(segs[0].blocks[0].stream, a);
  EXPECT_EQ(segs[0].blocks[1].stream, b);
  env.alloc->deallocate(q);
  const std::vector<trace_entry> trace = env.alloc->trace(0);
  bool saw_b_alloc = false;
  bool saw_b_free = false;
  for (const trace_entry& e : trace) {
    if (e.address != addr(q)) continue;
    saw_b_alloc = saw_b_alloc || (e.action == trace_action::alloc && e.stream == b);
    saw_b_free = saw_b_free || (e.action == trace_action::free_completed && e.stream == b);
  }
  EXPECT_TRUE(saw_b_alloc);
  EXPECT_TRUE(saw_b_free);
  EXPECT_EQ(env.segments()[0].blocks[1].stream, b) << "a free block keeps the stream of its last use";
  env.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::test
