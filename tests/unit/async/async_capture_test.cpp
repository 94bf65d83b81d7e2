// async_capture_test.cpp — capture in the cudaMallocAsync backend (Note [Captures in the
// cudaMallocAsync backend], Note [Private pools of the cudaMallocAsync backend], Note [Deferred
// frees during capture]): routing by filter, deferred frees of uncaptured memory, private-pool
// blocks (freed during or after the capture, reused only by the same pool, given back at
// release + empty_cache), several captures at once, no event query or synchronisation during
// capture, and the errors of the pool calls.
#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

class async_capture : public async_fixture {
 protected:
  void SetUp() override {
    async_fixture::SetUp();
    other_ = new_stream();
  }

  /// A stream scripted as capturing with `id`, and a filter accepting streams of that capture.
  stream_t start_capture(mempool_id pool, std::uint64_t id) {
    const stream_t stream = new_stream();
    sim_->set_capture(stream, capture_status::active, id);
    driver* drv = sim_.get();
    alloc_->begin_allocate_to_pool(pool, [drv, id](stream_t s) {
      capture_info info;
      return drv->stream_capture_info(s, &info).ok() && info.status == capture_status::active && info.id == id;
    });
    return stream;
  }

  void stop_capture(stream_t stream, mempool_id pool) {
    sim_->set_capture(stream, capture_status::none, 0);
    alloc_->end_allocate_to_pool(pool);
  }

  stream_t other_ = nullptr;
};

TEST_F(async_capture, UncapturedFreeIsDeferredUntilTheCaptureEnds) {
  void* before = alloc_->allocate(mib, other_);  // made before the capture
  const mempool_id pool = allocator::create_pool_id();
  const stream_t capturing = start_capture(pool, 7);
  const auto frees = sim_->calls(driver_call::free_async);

  alloc_->deallocate(before);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees);  // parked
  memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.active[0].current, 1);
  EXPECT_EQ(s.active_bytes[0].current, static_cast<std::int64_t>(mib));
  memory_snapshot snap = alloc_->snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_EQ(snap.segments[0].blocks[0].state, block_state::active_pending_free);
  EXPECT_EQ(snap.segments[0].allocated_size, 0u);
  EXPECT_THROW(alloc_->deallocate(before), error);  // already freed, even if parked

  stop_capture(capturing, pool);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees + 1);
  s = alloc_->stats(0);
  EXPECT_EQ(s.active[0].current, 0);
  EXPECT_EQ(s.segment[0].current, 0);
  EXPECT_TRUE(alloc_->snapshot().segments.empty());
  EXPECT_EQ(sim_->calls(driver_call::event_query), 0u);
}

// Changed with Note [Private pools of the cudaMallocAsync backend]: a captured allocation used to
// be a graph allocation node, freed with cudaFreeAsync (a graph free node); it is now a block of
// the private pool (cudaMalloc), and its free goes back to the pool with no driver call.
TEST_F(async_capture, CapturedAllocationsAreTaggedAndGoBackToTheirPool) {
  alloc_->record_history(true);
  const mempool_id pool = allocator::create_pool_id();
  const stream_t capturing = start_capture(pool, 11);
  void* captured = alloc_->allocate(4096, capturing);
  void* outside = alloc_->allocate(4096, other_);  // filter does not match: a normal allocation
  memory_snapshot snap = alloc_->snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  for (const segment_info& segment : snap.segments) {
    const bool is_captured = segment.address == reinterpret_cast<std::uintptr_t>(captured);
    EXPECT_EQ(segment.pool, is_captured ? pool : mempool_id{});
  }
  EXPECT_EQ(sim_->calls(driver_call::malloc), 1u) << "the private block is the pool's own memory";
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 1u) << "only the uncaptured allocation uses the stream-ordered pool";
  const auto frees = sim_->calls(driver_call::free_async);
  alloc_->deallocate(captured);  // back to the private pool
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees);
  EXPECT_EQ(sim_->calls(driver_call::free), 0u);
  alloc_->deallocate(outside);  // parked
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees);
  EXPECT_EQ(sim_->calls(driver_call::event_query), 0u);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 0u);
  stop_capture(capturing, pool);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees + 1);
  bool saw_pool_in_trace = false;
  for (const trace_entry& entry : alloc_->trace(0)) saw_pool_in_trace |= entry.pool == pool;
  EXPECT_TRUE(saw_pool_in_trace);
}

TEST_F(async_capture, RecordStreamDuringCaptureNeedsNoQuery) {
  const mempool_id pool = allocator::create_pool_id();
  const stream_t capturing = start_capture(pool, 3);
  const stream_t side = new_stream();
  sim_->set_capture(side, capture_status::active, 3);  // a side stream joined to the capture
  void* p = alloc_->allocate(mib, capturing);
  alloc_->record_stream(p, side);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 1u);
  EXPECT_EQ(sim_->calls(driver_call::event_query), 0u);
  EXPECT_EQ(sim_->calls(driver_call::event_synchronize), 0u);
  sim_->set_capture(side, capture_status::none, 0);
  stop_capture(capturing, pool);
}

TEST_F(async_capture, SeveralCapturesAtOnce) {
  void* before = alloc_->allocate(1000, other_);
  const mempool_id pool_a = allocator::create_pool_id();
  const mempool_id pool_b = allocator::create_pool_id();
  const stream_t stream_a = start_capture(pool_a, 21);
  const stream_t stream_b = start_capture(pool_b, 22);
  void* in_a = alloc_->allocate(1000, stream_a);
  void* in_b = alloc_->allocate(1000, stream_b);
  alloc_->deallocate(before);
  for (const segment_info& segment : alloc_->snapshot().segments) {
    if (segment.address == reinterpret_cast<std::uintptr_t>(in_a)) {
      EXPECT_EQ(segment.pool, pool_a);
    }
    if (segment.address == reinterpret_cast<std::uintptr_t>(in_b)) {
      EXPECT_EQ(segment.pool, pool_b);
    }
  }
  const auto frees = sim_->calls(driver_call::free_async);
  stop_capture(stream_a, pool_a);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees);  // capture B still underway
  stop_capture(stream_b, pool_b);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees + 1);
  alloc_->deallocate(in_a);
  alloc_->deallocate(in_b);
  EXPECT_EQ(alloc_->stats(0).active[0].current, 0);
  alloc_->release_pool(pool_a);
  alloc_->release_pool(pool_b);
}

TEST_F(async_capture, RoutingEndedBeforeTheStreamCaptureKeepsTheFreeParked) {
  void* before = alloc_->allocate(1000, other_);
  const mempool_id pool = allocator::create_pool_id();
  const stream_t capturing = start_capture(pool, 5);
  alloc_->deallocate(before);
  sim_->set_capture(other_, capture_status::active, 5);  // its stream joined the capture meanwhile
  const auto frees = sim_->calls(driver_call::free_async);
  alloc_->end_allocate_to_pool(pool);  // routing ends while streams still capture
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees);
  sim_->set_capture(other_, capture_status::none, 0);
  sim_->set_capture(capturing, capture_status::none, 0);
  alloc_->deallocate(alloc_->allocate(100, other_));  // the next call issues the parked free
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees + 2);
  EXPECT_EQ(alloc_->stats(0).active[0].current, 0);
}

TEST_F(async_capture, OomDuringCaptureIsNotRetried) {
  const mempool_id pool = allocator::create_pool_id();
  const stream_t capturing = start_capture(pool, 9);
  // Captured allocations are private-pool blocks (cudaMalloc); uncaptured ones come from the
  // stream-ordered pool. Neither is retried while the capture is underway.
  sim_->fail_next(driver_call::malloc, 1, status::out_of_memory);
  try {
    (void)alloc_->allocate(mib, capturing);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("capture is underway"), std::string::npos) << e.what();
  }
  sim_->fail_next(driver_call::malloc_async, 1);
  EXPECT_THROW((void)alloc_->allocate(mib, other_), out_of_memory);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 0u);
  EXPECT_EQ(sim_->calls(driver_call::malloc), 1u);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 1u);
  EXPECT_EQ(alloc_->stats(0).allocation[0].current, 0) << "nothing half-made";
  alloc_->empty_cache();  // a no-op while capturing: no illegal synchronisation
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 0u);
  stop_capture(capturing, pool);
}

// Note [Relaxed uncaptured calls] (docs/graph-capture.md): during a strict capture begun with
// stream_begin_capture, malloc_async / free_async on a stream outside it would fail and
// invalidate the capture unless the thread is relaxed. The backend makes such calls relaxed while
// a recording is underway, and when it issues parked frees (a capture may still be open then).
TEST_F(async_capture, CallsOnUncapturedStreamsLeaveAStrictCaptureIntact) {
  void* before = alloc_->allocate(mib, other_);  // made before the capture, on another stream
  const stream_t capturing = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [capturing](stream_t s) { return s == capturing; });
  ASSERT_TRUE(sim_->stream_begin_capture(capturing, capture_mode::global).ok());
  const auto capture_active = [&] {
    capture_info info;
    return sim_->stream_capture_info(capturing, &info).ok() && info.status == capture_status::active;
  };

  void* side = alloc_->allocate(4096, other_);  // not routed: a pool allocation during the capture
  EXPECT_TRUE(capture_active());
  alloc_->deallocate(before);  // parked (Note [Deferred frees during capture])
  alloc_->deallocate(side);    // parked too
  EXPECT_TRUE(capture_active());
  // Routing ends before the stream capture does: the parked frees (on a stream that is not
  // capturing) are issued now, while the strict capture is still open.
  const auto frees = sim_->calls(driver_call::free_async);
  alloc_->end_allocate_to_pool(pool);
  EXPECT_EQ(sim_->calls(driver_call::free_async), frees + 2);
  EXPECT_TRUE(capture_active());
  EXPECT_EQ(alloc_->stats(0).active[0].current, 0);

  graph_t graph = nullptr;
  ASSERT_TRUE(sim_->stream_end_capture(capturing, &graph).ok());  // the capture was not invalidated
  EXPECT_TRUE(sim_->graph_destroy(graph).ok());
  alloc_->release_pool(pool);
}

TEST_F(async_capture, PoolCallErrors) {
  const mempool_id pool = allocator::create_pool_id();
  const auto any = [](stream_t) { return true; };
  alloc_->begin_allocate_to_pool(pool, any);
  EXPECT_THROW(alloc_->begin_allocate_to_pool(pool, any), error);  // already recording to it
  alloc_->end_allocate_to_pool(pool);
  EXPECT_THROW(alloc_->end_allocate_to_pool(pool), error);  // not recording any more
  alloc_->begin_allocate_to_pool(pool, any);  // a second capture into the same pool: use count 2
  alloc_->end_allocate_to_pool(pool);
  alloc_->release_pool(pool);
  alloc_->release_pool(pool);
  EXPECT_THROW(alloc_->release_pool(pool), error);  // no use left
  EXPECT_THROW(alloc_->release_pool(allocator::create_pool_id()), error);  // never used
  EXPECT_THROW(alloc_->begin_allocate_to_pool(mempool_id{}, any), error);  // the default id
}

}  // namespace
}  // namespace streampool::testing
