// capture_scope_test.cpp — capture_scope and captured_graph on every backend and driver (the sim,
// and a real GPU where present): routing of the capture stream and of joined side streams to the
// private pool (and of nothing else), several captures at once, pool sharing, memory released
// only once no graph can replay, the id of a released pool, graph pools in statistics and
// snapshots, replays, and misuse.
// Sim-only bookkeeping (call counters, faults, invalidation) is in capture_safety_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "streampool/graph.hpp"
#include "support/backend_fixture.hpp"
#include "support/warnings_scope.hpp"

namespace streampool::testing {
namespace {

class capture : public backend_test {
 protected:
  /// The pool id of the snapshot segment holding `ptr` ({0,0} = a default pool).
  mempool_id pool_of(const void* ptr) {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    for (const segment_info& segment : alloc_->snapshot().segments) {
      if (segment.address <= address && address < segment.address + segment.total_size) return segment.pool;
    }
    ADD_FAILURE() << "no segment holds " << ptr;
    return {};
  }
  /// On a real device, a memory node of the driver's default pool, so the graph is not empty.
  void touch(stream_t stream) {
    if (sim_ != nullptr) return;
    mempool_t pool = nullptr;
    void* ptr = nullptr;
    check(*driver_, driver_->pool_get_default(0, &pool), "pool_get_default");
    check(*driver_, driver_->malloc_async(pool, 512, stream, &ptr), "malloc_async");
    check(*driver_, driver_->free_async(ptr, stream), "free_async");
  }
  /// Makes `side` join the capture of `origin` (fork: side waits on an event recorded on origin).
  void fork(stream_t origin, stream_t side) {
    event_t event = nullptr;
    check(*driver_, driver_->event_create(0, &event), "event_create");
    check(*driver_, driver_->event_record(event, origin), "event_record");
    check(*driver_, driver_->stream_wait_event(side, event), "stream_wait_event");
    check(*driver_, driver_->event_destroy(0, event), "event_destroy");
  }
  std::int64_t reserved() { return alloc_->stats().reserved_bytes[0].current; }
};

TEST_P(capture, RoutesTheCaptureStreamAndJoinedSideStreamsToThePool) {
  const stream_t s = new_stream();
  const stream_t side = new_stream();
  const stream_t elsewhere = new_stream();
  capture_scope scope(*alloc_, s);
  EXPECT_TRUE(scope.active());
  EXPECT_NE(scope.capture_id(), 0u);
  fork(s, side);
  touch(s);
  void* in_capture = alloc_->allocate(4096, s);
  void* on_side = alloc_->allocate(3 * mib, side);
  void* outside = alloc_->allocate(4096, elsewhere);
  EXPECT_EQ(pool_of(in_capture), scope.pool());
  EXPECT_EQ(pool_of(on_side), scope.pool()) << "a side stream joined to the capture allocates from its pool";
  EXPECT_TRUE(pool_of(outside).is_default()) << "a stream outside the capture does not";
  alloc_->deallocate(in_capture);
  alloc_->deallocate(on_side);  // on the side stream, after its last join: end() joins it back
  captured_graph graph = scope.end();
  EXPECT_FALSE(scope.active());
  ASSERT_TRUE(graph);
  EXPECT_EQ(graph.pool(), scope.pool());
  graph.launch(s);
  graph.launch(s);
  synchronize();
  void* after = alloc_->allocate(4096, s);
  EXPECT_TRUE(pool_of(after).is_default()) << "routing ended with the capture";
  alloc_->deallocate(after);
  alloc_->deallocate(outside);
}

TEST_P(capture, SeveralCapturesAtOnceRouteToTheirOwnPools) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  // Each step checks that the captures are still valid, so a GPU run names the call that broke one.
  const auto still_capturing = [&](const char* after, bool b_too = true) {
    for (const stream_t stream : {a, b}) {
      if (stream == b && !b_too) continue;
      capture_info info;
      check(*driver_, driver_->stream_capture_info(stream, &info), "stream_capture_info");
      EXPECT_EQ(info.status, capture_status::active) << (stream == a ? "a" : "b") << " after " << after;
    }
  };
  capture_scope first(*alloc_, a);
  capture_scope second(*alloc_, b);
  EXPECT_NE(first.pool(), second.pool());
  EXPECT_NE(first.capture_id(), second.capture_id());
  still_capturing("both scopes began");
  touch(a);
  touch(b);
  still_capturing("the memory nodes");
  void* in_a = alloc_->allocate(1000, a);
  still_capturing("allocating on a");
  void* in_b = alloc_->allocate(1000, b);
  still_capturing("allocating on b");
  EXPECT_EQ(pool_of(in_a), first.pool());
  EXPECT_EQ(pool_of(in_b), second.pool());
  alloc_->deallocate(in_b);
  still_capturing("freeing on b");
  captured_graph graph_b = second.end();  // out of order: b ends first
  still_capturing("the end of b", /*b_too=*/false);
  void* still_a = alloc_->allocate(2000, a);
  EXPECT_EQ(pool_of(still_a), first.pool());
  alloc_->deallocate(still_a);
  alloc_->deallocate(in_a);
  captured_graph graph_a = first.end();
  graph_a.launch(a);
  graph_b.launch(b);
  synchronize();
}

TEST_P(capture, GraphsShareAPoolAndItsMemoryLivesUntilTheLastIsDestroyed) {
  const stream_t s = new_stream();
  alloc_->empty_cache();
  const std::int64_t baseline = reserved();
  captured_graph first;
  {
    capture_scope scope(*alloc_, s);
    touch(s);
    void* step = alloc_->allocate(5 * mib, s);
    alloc_->deallocate(step);  // like activations freed at the end of a captured step
    first = scope.end();
  }
  const std::int64_t with_first = reserved();
  captured_graph second;
  {
    capture_scope scope(*alloc_, s, first.pool());
    EXPECT_EQ(scope.pool(), first.pool());
    touch(s);
    void* step = alloc_->allocate(5 * mib, s);
    EXPECT_EQ(pool_of(step), first.pool());
    alloc_->deallocate(step);
    second = scope.end();
  }
  // Both backends (cudaMallocAsync: Note [Private pools of the cudaMallocAsync backend]).
  EXPECT_GT(with_first, baseline) << "the private pool holds the captured step's segment";
  EXPECT_EQ(reserved(), with_first) << "the second graph reuses the shared pool's memory";
  for (int replay = 0; replay < 3; ++replay) {  // capture order, one stream: never concurrent
    first.launch(s);
    second.launch(s);
  }
  synchronize();
  first.reset();
  alloc_->empty_cache();
  EXPECT_EQ(reserved(), with_first) << "the second graph still uses the pool";
  const mempool_id pool = second.pool();
  second = captured_graph{};  // move-assigning an empty graph destroys the old one
  alloc_->empty_cache();
  EXPECT_EQ(reserved(), baseline) << "no graph can replay: the pool's memory is released";
  EXPECT_THROW(alloc_->release_pool(pool), error) << "both uses were given back";
}

// Note [Released pools] (src/capture/capture_router.cpp), the same on both backends: once every
// use of a pool was released, its id is refused until empty_cache() has freed the pool, which it
// does only when none of the pool's memory is in use; then the id starts a new pool.
TEST_P(capture, AReleasedPoolIdIsRefusedUntilEmptyCacheFreesThePool) {
  const warnings_scope warnings;  // no backend warns here; kept so that a warning cannot reach stderr
  const stream_t s = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  const auto refused = [&] {
    try {
      capture_scope again(*alloc_, s, pool);
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("was released"), std::string::npos) << e.what();
      return true;
    }
    return false;
  };
  // A pool none of whose memory outlives its graph.
  {
    capture_scope scope(*alloc_, s, pool);
    touch(s);
    alloc_->deallocate(alloc_->allocate(mib, s));
    captured_graph graph = scope.end();
    graph.launch(s);
    synchronize();
  }  // the graph is destroyed: its use of the pool is released (use count 0)
  EXPECT_TRUE(refused()) << "released, not yet freed";
  EXPECT_TRUE(refused()) << "a refused begin changes nothing";
  alloc_->empty_cache();
  void* kept = nullptr;
  {
    capture_scope scope(*alloc_, s, pool);  // freed and forgotten: the id starts a new pool
    touch(s);
    kept = alloc_->allocate(mib, s);  // outlives the graph
    EXPECT_EQ(pool_of(kept), pool);
    captured_graph graph = scope.end();
    graph.launch(s);
    synchronize();
  }
  alloc_->empty_cache();
  EXPECT_TRUE(refused()) << "a live allocation keeps the released pool";
  alloc_->deallocate(kept);
  synchronize();
  EXPECT_TRUE(refused()) << "only empty_cache frees the pool";
  alloc_->empty_cache();
  {
    capture_scope scope(*alloc_, s, pool);
    touch(s);
    alloc_->deallocate(alloc_->allocate(mib, s));
    captured_graph graph = scope.end();
  }
  alloc_->empty_cache();
  EXPECT_THROW(alloc_->release_pool(pool), error) << "every use was given back";
}

TEST_P(capture, GraphPoolMemoryShowsInStatisticsAndSnapshots) {
  const stream_t s = new_stream();
  const memory_stats before = alloc_->stats();
  capture_scope scope(*alloc_, s);
  touch(s);
  void* kept = alloc_->allocate(2 * mib, s);
  const memory_stats during = alloc_->stats();
  EXPECT_EQ(during.allocation[0].current, before.allocation[0].current + 1);
  EXPECT_GE(during.allocated_bytes[0].current, before.allocated_bytes[0].current + std::int64_t(2 * mib));
  // Both backends, sim and GPU: the captured bytes are the private pool's reserve.
  EXPECT_GE(during.reserved_bytes[0].current, during.allocated_bytes[0].current);
  std::size_t pool_segments = 0;
  for (const segment_info& segment : alloc_->snapshot().segments) pool_segments += segment.pool == scope.pool();
  EXPECT_GE(pool_segments, 1u);
  EXPECT_NE(alloc_->snapshot().to_json().find("segment_pool_id"), std::string::npos);
  alloc_->deallocate(kept);
  captured_graph graph = scope.end();
  EXPECT_EQ(alloc_->stats().allocation[0].current, before.allocation[0].current);
}

TEST_P(capture, ADefaultStreamOrTheDefaultPoolIdIsRefused) {
  try {
    capture_scope scope(*alloc_, nullptr);
    ADD_FAILURE() << "capturing the legacy stream was accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("non-default stream"), std::string::npos) << e.what();
  }
  EXPECT_THROW(capture_scope(*alloc_, reinterpret_cast<stream_t>(2)), error) << "cudaStreamPerThread";
  const stream_t s = new_stream();
  EXPECT_THROW(capture_scope(*alloc_, s, mempool_id{}), error);
  capture_info info;
  check(*driver_, driver_->stream_capture_info(s, &info), "stream_capture_info");
  EXPECT_EQ(info.status, capture_status::none) << "nothing began";
  capture_scope scope(*alloc_, s);  // and the allocator still captures
  touch(s);
  EXPECT_THROW(capture_scope(*alloc_, s, scope.pool()), error) << "the pool is already being recorded to";
  EXPECT_TRUE(scope.active()) << "the refused scope did not disturb the running one";
  captured_graph graph = scope.end();
  EXPECT_THROW((void)scope.end(), error) << "end() twice";
  captured_graph empty;
  EXPECT_THROW(empty.launch(s), error);
  captured_graph moved = std::move(graph);
  EXPECT_FALSE(graph);  // NOLINT(bugprone-use-after-move): a moved-from graph is empty by contract
  EXPECT_TRUE(moved);
}

// Both backends, sim and GPU: an allocation made into a capture's private pool is memory the
// graph merely uses. Freed after the capture and before the first replay (PyTorch's cudagraph
// trees do this, e.g. with the cuBLAS workspace), it raises no error and no warning, eager code
// never gets its address while the pool lives, the graph replays, a second capture sharing the
// pool reuses it, and once the graphs are gone empty_cache gives the memory back. On the
// cudaMallocAsync backend this replaced graph memory nodes, whose eager free the real driver
// refuses before a launch (Note [Private pools of the cudaMallocAsync backend]); it replaced a
// sim test that pinned that old behaviour (a warning, then cudaFreeAsync of graph memory).
TEST_P(capture, ACapturedAllocationFreedBeforeTheFirstReplayStaysWithItsPool) {
  const stream_t s = new_stream();
  const stream_t other = new_stream();
  void* outlives = nullptr;
  captured_graph graph;
  {
    capture_scope scope(*alloc_, s);  // global mode: the sim refuses anything illegal, as CUDA does
    touch(s);
    outlives = alloc_->allocate(mib, s);
    alloc_->deallocate(alloc_->allocate(2 * mib, s));  // freed inside the capture
    graph = scope.end();
  }
  std::vector<std::string> warned;
  {
    const warnings_scope collecting;
    EXPECT_NO_THROW(alloc_->deallocate(outlives));  // before any replay
    warned = warnings_scope::messages();
  }
  EXPECT_TRUE(warned.empty()) << warned.front();
  void* eager_same = alloc_->allocate(mib, s);
  void* eager_other = alloc_->allocate(mib, other);
  EXPECT_NE(eager_same, outlives) << "handed to eager code while the pool lives";
  EXPECT_NE(eager_other, outlives) << "handed to eager code while the pool lives";
  for (int replay = 0; replay < 3; ++replay) graph.launch(s);

  captured_graph second;
  {
    capture_scope scope(*alloc_, s, graph.pool());  // sharing the pool
    touch(s);
    void* reused = alloc_->allocate(mib, s);
    EXPECT_EQ(reused, outlives) << "the pool's freed block serves the next capture into it";
    second = scope.end();
    alloc_->deallocate(reused);  // after the capture, before its first replay
  }
  graph.launch(s);
  second.launch(s);
  synchronize();
  alloc_->deallocate(eager_same);
  alloc_->deallocate(eager_other);
  graph.reset();
  second.reset();
  alloc_->empty_cache();
  EXPECT_TRUE(alloc_->snapshot().segments.empty()) << "the pool's memory went back with the graphs";
}

INSTANTIATE_TEST_SUITE_P(every_backend, capture, ::testing::ValuesIn(all_backend_cases()), backend_case_name);

}  // namespace
}  // namespace streampool::testing
