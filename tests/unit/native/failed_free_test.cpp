// A deallocate that throws leaves the state unchanged (allocator.hpp; Note [Failed frees] in
// src/native/event_queues.cpp): when the events of a record_stream'ed block cannot be created or
// recorded, the block stays allocated, nothing is counted as freed, no event is left pending, and
// the free succeeds when retried. Formerly known_bugs.NativeDeallocateThatThrowsLeavesTheBlockLive.
#include <gtest/gtest.h>

#include <string>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

sim_options lazy() {
  sim_options o;
  o.eager_completion = false;
  return o;
}

/// The message of the cuda_error that `body` throws ("" and a test failure when it does not).
template <typename F>
std::string cuda_error_of(F&& body) {
  try {
    body();
  } catch (const cuda_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected cuda_error";
  return "";
}

TEST(failed_free, EventCreateFailureLeavesTheBlockLive) {
  native_env env("", lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* p = env.alloc->allocate(1000, a);
  env.alloc->record_stream(p, b);
  const memory_stats before = env.stats();
  env.sim->fail_next(driver_call::event_create, 1, status::other);

  const std::string message = cuda_error_of([&] { env.alloc->deallocate(p); });
  EXPECT_NE(message.find("the block is still allocated"), std::string::npos) << message;
  EXPECT_NE(message.find("retry deallocate()"), std::string::npos) << message;

  const memory_stats after = env.stats();
  EXPECT_EQ(after.allocation[all].current, 1) << "deallocate threw, but the allocation was freed";
  EXPECT_EQ(after.allocated_bytes[all].current, before.allocated_bytes[all].current);
  EXPECT_EQ(after.active_bytes[all].current, before.active_bytes[all].current);
  EXPECT_EQ(after.allocation[all].freed, before.allocation[all].freed);
  EXPECT_EQ(env.native().pending_events(0), 0u);
  ASSERT_EQ(env.segments().size(), 1u);
  EXPECT_EQ(env.segments()[0].blocks[0].state, block_state::active_allocated);
  EXPECT_NO_THROW(env.alloc->record_stream(p, a)) << "the pointer is still live";

  // The driver works again: the retry frees it, waiting for b as record_stream asked.
  EXPECT_NO_THROW(env.alloc->deallocate(p));
  EXPECT_EQ(env.stats().allocation[all].current, 0);
  EXPECT_EQ(env.native().pending_events(0), 1u);
  EXPECT_NE(env.alloc->allocate(1000, a), p) << "b has not passed the event yet";
  env.sim->complete(b);
  EXPECT_EQ(env.alloc->allocate(1000, a), p) << "reused once b passed the event";
}

TEST(failed_free, EventRecordFailureOnTheSecondStreamRecordsNothing) {
  native_env env("", lazy());
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  const stream_t c = env.new_stream();
  void* p = env.alloc->allocate(4096, a);
  env.alloc->record_stream(p, b);
  env.alloc->record_stream(p, c);
  env.sim->fail_next(driver_call::event_record, 1, status::other, /*skip=*/1);

  const std::string message = cuda_error_of([&] { env.alloc->deallocate(p); });
  EXPECT_NE(message.find("cudaEventRecord"), std::string::npos) << message;
  EXPECT_EQ(env.stats().allocation[all].current, 1);
  EXPECT_EQ(env.native().pending_events(0), 0u) << "the event recorded on b was given back";
  const std::size_t events = env.native().events_created(0);
  EXPECT_EQ(events, 2u);

  env.sim->reset_counters();
  EXPECT_NO_THROW(env.alloc->deallocate(p));
  EXPECT_EQ(env.calls(driver_call::event_create), 0u) << "the two events came back to the pool";
  EXPECT_EQ(env.calls(driver_call::event_record), 2u);
  EXPECT_EQ(env.native().pending_events(0), 2u);
  env.sim->complete_all();
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
}

TEST(failed_free, ParkedFreeWhoseEventFailsStaysParkedUntilTheDriverRecovers) {
  native_env env("", lazy());
  const stream_t side = env.new_stream();
  const stream_t cap = env.new_stream();
  void* x = env.alloc->allocate(4096, side);
  env.alloc->record_stream(x, cap);  // a use from before the capture: needs an event afterwards
  const mempool_id pool = allocator::create_pool_id();
  env.alloc->begin_allocate_to_pool(pool, [cap](stream_t s) { return s == cap; });
  env.sim->set_capture(cap, capture_status::active, 5);
  env.alloc->deallocate(x);  // parked (Note [Deferred frees during capture])
  env.sim->set_capture(cap, capture_status::none, 0);
  env.alloc->end_allocate_to_pool(pool);

  env.sim->fail_next(driver_call::event_create, 1, status::other);
  (void)cuda_error_of([&] { (void)env.alloc->allocate(4096, side); });
  EXPECT_EQ(env.stats().active[all].current, 1) << "x is still parked (active, not allocated)";
  EXPECT_EQ(env.native().pending_events(0), 0u);

  void* y = env.alloc->allocate(4096, side);  // retried: x now waits for its event on cap
  EXPECT_NE(y, x);
  EXPECT_EQ(env.native().pending_events(0), 1u);
  env.sim->complete(cap);
  void* z = env.alloc->allocate(4096, side);
  EXPECT_EQ(z, x) << "x is reused once cap passed the event";
  env.alloc->deallocate(y);
  env.alloc->deallocate(z);
  env.alloc->release_pool(pool);
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
}

}  // namespace
}  // namespace streampool::test
