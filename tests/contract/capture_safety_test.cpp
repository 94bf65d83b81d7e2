// capture_safety_test.cpp — capture bookkeeping that only the sim driver can observe, on both
// backends: nothing illegal is issued while a capture_scope is open (the sim would refuse it and
// invalidate the capture, so end() succeeding is itself the proof; the call counters say which),
// out-of-memory and failures during a capture leave the capture and the allocator usable,
// record_stream during capture (docs/pytorch-compatibility.md §3.4 default mode), and the graph objects' lifetime.
#include <gtest/gtest.h>

#include <string>

#include "streampool/graph.hpp"
#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

/// Frees its allocation when it goes out of scope, as a framework's tensor does.
struct buffer {
  allocator& alloc;
  void* ptr;
  buffer(allocator& a, std::size_t bytes, stream_t stream) : alloc(a), ptr(a.allocate(bytes, stream)) {}
  ~buffer() { alloc.deallocate(ptr); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
};

class capture_safety : public backend_test {
 protected:
  capture_status status_of(stream_t stream) {
    capture_info info;
    check(*driver_, driver_->stream_capture_info(stream, &info), "stream_capture_info");
    return info.status;
  }
  bool pending_free_in_snapshot() {
    for (const segment_info& segment : alloc_->snapshot().segments) {
      for (const block_info& block : segment.blocks) {
        if (block.state == block_state::active_pending_free) return true;
      }
    }
    return false;
  }
  /// A capture that must still work after whatever the test did.
  void expect_a_fresh_capture_works(stream_t stream) {
    capture_scope scope(*alloc_, stream);
    { buffer step(*alloc_, 3 * mib, stream); }
    captured_graph graph = scope.end();
    EXPECT_NO_THROW(graph.launch(stream));
  }
};

TEST_P(capture_safety, NothingIllegalIsIssuedWhileACaptureIsOpen) {
  sim_->set_eager(false);  // events stay pending: any query would see not_ready
  const stream_t s = new_stream();
  const stream_t side = new_stream();
  const stream_t other = new_stream();
  void* used_elsewhere = alloc_->allocate(4096, side);
  alloc_->record_stream(used_elsewhere, other);
  void* before = alloc_->allocate(8 * mib, side);
  { buffer cached(*alloc_, 3 * mib, side); }  // a cached block, and an event pending for `other`
  capture_scope scope(*alloc_, s);
  sim_->reset_counters();
  alloc_->deallocate(used_elsewhere);  // pre-capture stream use: deferred
  alloc_->deallocate(before);          // allocated before the capture
  for (const std::size_t bytes : {std::size_t{512}, 100 * kib, 3 * mib, 30 * mib}) {
    buffer step(*alloc_, bytes, s);
    alloc_->record_stream(step.ptr, side);  // a capture-time use
  }
  buffer elsewhere(*alloc_, 64 * mib, other);  // not captured, served while the capture runs
  alloc_->empty_cache();                        // skipped while capturing
  (void)alloc_->stats();
  (void)alloc_->snapshot();
  for (const driver_call call : {driver_call::event_query, driver_call::event_synchronize, driver_call::free,
                                 driver_call::stream_synchronize, driver_call::device_synchronize,
                                 driver_call::pool_trim_to, driver_call::vmm_unmap, driver_call::vmm_release,
                                 driver_call::graph_mem_trim}) {
    EXPECT_EQ(sim_->calls(call), 0u) << to_string(call) << " while capturing";
  }
  captured_graph graph = scope.end();  // would throw had the sim refused (and so invalidated) a call
  EXPECT_TRUE(graph);
  sim_->complete_all();
  alloc_->empty_cache();
  EXPECT_FALSE(pending_free_in_snapshot()) << "frees deferred by the capture are done";
}

TEST_P(capture_safety, OutOfMemoryDuringCaptureUndoesItAndTheAllocatorKeepsWorking) {
  const stream_t s = new_stream();
  std::string message;
  try {
    capture_scope scope(*alloc_, s);
    buffer activations(*alloc_, 2 * gib, s);
    buffer too_big(*alloc_, 16 * gib, s);  // the sim device has 8 GiB
    (void)scope.end();
    ADD_FAILURE() << "16 GiB were allocated on an 8 GiB device";
  } catch (const out_of_memory& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
  EXPECT_NE(message.find("16.00 GiB"), std::string::npos) << "says what was asked: " << message;
  EXPECT_EQ(status_of(s), capture_status::none) << "the scope ended the capture";
  EXPECT_EQ(sim_->live_graphs(), 0u) << "and discarded its graph";
  void* after = alloc_->allocate(mib, s);
  const auto address = reinterpret_cast<std::uintptr_t>(after);
  for (const segment_info& segment : alloc_->snapshot().segments) {
    if (segment.address <= address && address < segment.address + segment.total_size) {
      EXPECT_TRUE(segment.pool.is_default()) << "nothing routes to the abandoned pool";
    }
  }
  alloc_->deallocate(after);
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().reserved_bytes[0].current, 0) << "the abandoned pool's memory was released";
  EXPECT_EQ(sim_->bytes_in_use(0), 0u);
  expect_a_fresh_capture_works(s);
}

TEST_P(capture_safety, RecordStreamDuringCaptureDefersTheFreeUntilItEnds) {
  const stream_t s = new_stream();
  const stream_t side = new_stream();
  void* x = alloc_->allocate(4096, side);
  capture_scope scope(*alloc_, s);
  alloc_->record_stream(x, s);  // a use recorded during the capture
  alloc_->deallocate(x);
  EXPECT_TRUE(pending_free_in_snapshot()) << "the free waits for the capture to end";
  EXPECT_EQ(alloc_->stats().allocation[0].current, 0);
  captured_graph graph = scope.end();
  void* y = alloc_->allocate(4096, side);  // the first allocation after the capture handles it
  if (is_native()) {
    EXPECT_EQ(y, x) << "docs/pytorch-compatibility.md §3.4: the capture-time use is dropped, the block is reusable at once";
  }
  EXPECT_FALSE(pending_free_in_snapshot());
  EXPECT_EQ(sim_->calls(driver_call::event_query), 0u);
  alloc_->deallocate(y);
}

TEST_P(capture_safety, AnInvalidatedCaptureFailsAtEndAndUndoesEverything) {
  const stream_t s = new_stream();
  capture_scope scope(*alloc_, s);
  const mempool_id pool = scope.pool();
  void* captured = alloc_->allocate(mib, s);
  EXPECT_FALSE(driver_->device_synchronize(0).ok()) << "someone else's illegal call invalidates the capture";
  EXPECT_EQ(status_of(s), capture_status::invalidated);
  const auto frees = sim_->calls(driver_call::free_async);
  alloc_->deallocate(captured);  // cudaMallocAsync: back to its private pool, no driver call
  if (!is_native()) {
    EXPECT_EQ(sim_->calls(driver_call::free_async), frees);
  }
  try {
    (void)scope.end();
    ADD_FAILURE() << "end() of an invalidated capture succeeded";
  } catch (const cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("invalidated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(scope.active());
  EXPECT_EQ(status_of(s), capture_status::none);
  EXPECT_EQ(sim_->live_graphs(), 0u);
  EXPECT_EQ(alloc_->stats().allocation[0].current, 0);
  EXPECT_THROW(alloc_->release_pool(pool), error) << "the scope already gave the pool back";
  expect_a_fresh_capture_works(s);
}

// capture::capture_sequence: an allocation of an invalidated capture still goes to the capture's
// pool (the rule the C API's filter had; capture_scope's used to send it to the general pool),
// which end() gives back with everything else. CUDA gives an invalidated capture no id: the
// sequence knows its origin stream.
TEST_P(capture_safety, AnInvalidatedCapturesLaterAllocationsStayInItsPool) {
  if (!is_native()) GTEST_SKIP() << "the driver refuses cudaMallocAsync on an invalidated capture's stream";
  const stream_t s = new_stream();
  capture_scope scope(*alloc_, s);
  const mempool_id pool = scope.pool();
  EXPECT_FALSE(driver_->device_synchronize(0).ok()) << "invalidates the capture";
  ASSERT_EQ(status_of(s), capture_status::invalidated);
  void* late = alloc_->allocate(mib, s);
  bool in_pool = false;
  for (const segment_info& seg : alloc_->snapshot().segments) {
    const auto p = reinterpret_cast<std::uintptr_t>(late);
    if (p >= seg.address && p < seg.address + seg.total_size) in_pool = seg.pool == pool;
  }
  EXPECT_TRUE(in_pool) << "the late allocation went to the general pool";
  alloc_->deallocate(late);
  EXPECT_THROW((void)scope.end(), cuda_error);
  EXPECT_EQ(alloc_->stats().allocation[0].current, 0);
  expect_a_fresh_capture_works(s);
}

TEST_P(capture_safety, FailedInstantiationUndoesTheCapture) {
  const stream_t s = new_stream();
  capture_scope scope(*alloc_, s);
  const mempool_id pool = scope.pool();
  { buffer step(*alloc_, mib, s); }
  sim_->fail_next(driver_call::graph_instantiate, 1, status::out_of_memory);
  EXPECT_THROW((void)scope.end(), out_of_memory);
  EXPECT_EQ(sim_->live_graphs(), 0u) << "the captured graph was destroyed";
  EXPECT_EQ(sim_->live_graph_execs(), 0u);
  EXPECT_THROW(alloc_->release_pool(pool), error) << "the pool use was given back";
  expect_a_fresh_capture_works(s);
}

TEST_P(capture_safety, GraphObjectsLiveExactlyAsLongAsTheCapturedGraph) {
  const stream_t s = new_stream();
  capture_options options;
  options.auto_free_on_launch = true;
  captured_graph graph;
  {
    capture_scope scope(*alloc_, s, options);
    { buffer step(*alloc_, mib, s); }
    graph = scope.end();
  }
  EXPECT_EQ(sim_->live_graphs(), 1u);
  EXPECT_EQ(sim_->live_graph_execs(), 1u);
  sim_->reset_counters();
  for (int replay = 0; replay < 5; ++replay) graph.launch(s);
  EXPECT_EQ(sim_->calls(driver_call::graph_launch), 5u);
  EXPECT_EQ(sim_->calls(driver_call::malloc) + sim_->calls(driver_call::malloc_async), 0u) << "replays allocate nothing";
  captured_graph moved(std::move(graph));
  EXPECT_EQ(sim_->live_graph_execs(), 1u) << "a move transfers, it does not copy or destroy";
  moved.reset();
  EXPECT_EQ(sim_->live_graphs(), 0u);
  EXPECT_EQ(sim_->live_graph_execs(), 0u);
  EXPECT_THROW(moved.launch(s), error);
}

INSTANTIATE_TEST_SUITE_P(sim, capture_safety, ::testing::ValuesIn(backend_cases(false)), backend_case_name);

}  // namespace
}  // namespace streampool::testing
