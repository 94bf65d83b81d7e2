// sim_streams_test.cpp — the sim driver's streams and events: handles, eager and controlled
// completion, synchronisation scope, stream_wait_event ordering (chains and cycles), default
// streams (legacy and per-thread), and the error paths of stale or foreign handles.
#include <gtest/gtest.h>

#include <thread>

#include "driver_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

class sim_streams : public sim_test {
 protected:
  sim_options make_options() override { return lazy_two_devices(); }
  void record(event_t event, stream_t stream) { ASSERT_TRUE(ok(sim().event_record(event, stream))); }
  ::testing::AssertionResult done(event_t event) { return ok(sim().event_query(event)); }
  ::testing::AssertionResult pending(event_t event) { return fails(status::not_ready, sim().event_query(event)); }
};

TEST_F(sim_streams, HandlesAreDistinctAndStaleOnesStayInvalid) {
  const stream_t first = new_stream();
  const stream_t second = new_stream();
  EXPECT_NE(first, nullptr);
  EXPECT_NE(first, second);
  ASSERT_TRUE(ok(sim().stream_destroy(0, first)));
  const stream_t third = new_stream();
  EXPECT_NE(third, first) << "handles are never reused";
  const event_t event = new_event();
  capture_info info;
  void* ptr = nullptr;
  mempool_t pool = nullptr;
  ASSERT_TRUE(ok(sim().pool_get_default(0, &pool)));
  // A destroyed stream fails as on the real driver (not "invalid value"), and each use is counted:
  // Note [Sim destroyed streams].
  EXPECT_EQ(sim().destroyed_stream_uses(), 0u);
  EXPECT_TRUE(fails(status::other, sim().stream_destroy(0, first)));
  EXPECT_TRUE(fails(status::other, sim().stream_synchronize(0, first)));
  EXPECT_TRUE(fails(status::other, sim().stream_wait_event(first, event)));
  EXPECT_TRUE(fails(status::other, sim().stream_capture_info(first, &info)));
  EXPECT_TRUE(fails(status::other, sim().event_record(event, first)));
  EXPECT_TRUE(fails(status::other, sim().malloc_async(pool, 1, first, &ptr)));
  EXPECT_TRUE(fails(status::other, sim().free_async(nullptr, first)));
  int device = -1;
  EXPECT_TRUE(fails(status::other, sim().stream_get_device(first, &device)));
  EXPECT_EQ(sim().destroyed_stream_uses(), 8u);
  const drv_result synced = sim().stream_synchronize(0, first);
  EXPECT_NE(sim().describe(synced).find("destroyed stream"), std::string::npos) << sim().describe(synced);
  // A handle that never was a stream is an invalid value, and not counted.
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_synchronize(0, reinterpret_cast<stream_t>(0x1234))));
  EXPECT_EQ(sim().destroyed_stream_uses(), 9u);
  EXPECT_THROW(sim().complete(first), error);
}

TEST_F(sim_streams, StreamsBelongToTheirDevice) {
  const stream_t on_one = new_stream(1);
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_synchronize(0, on_one)));
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_destroy(0, on_one)));
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_destroy(0, nullptr))) << "the legacy stream stays";
  const event_t on_zero = new_event(0);
  EXPECT_TRUE(fails(status::invalid_value, sim().event_record(on_zero, on_one)));
  EXPECT_TRUE(fails(status::invalid_value, sim().event_destroy(1, on_zero)));
  EXPECT_TRUE(ok(sim().stream_destroy(1, on_one)));
  stream_t none = reinterpret_cast<stream_t>(0x1);
  EXPECT_TRUE(fails(status::invalid_device, sim().stream_create(2, &none)));
  EXPECT_EQ(none, nullptr);
}

TEST_F(sim_streams, ControlledCompletionFollowsTheTest) {
  const stream_t stream = new_stream();
  const event_t event = new_event();
  EXPECT_TRUE(done(event)) << "never recorded";
  record(event, stream);
  EXPECT_TRUE(pending(event));
  sim().complete(stream);
  EXPECT_TRUE(done(event));
  record(event, stream);
  EXPECT_TRUE(pending(event)) << "re-recording targets the new work";
  sim().complete_all();
  EXPECT_TRUE(done(event));
}

TEST_F(sim_streams, EagerModeCompletesAtOnceAndSwitchingToItFlushes) {
  const stream_t stream = new_stream();
  const event_t event = new_event();
  record(event, stream);
  EXPECT_TRUE(pending(event));
  sim().set_eager(true);
  EXPECT_TRUE(done(event)) << "switching to eager completes everything";
  record(event, stream);
  EXPECT_TRUE(done(event));
  sim_driver eager;  // default options are eager
  event_t other = nullptr;
  ASSERT_TRUE(succeeded(eager, eager.event_create(0, &other)));
  ASSERT_TRUE(succeeded(eager, eager.event_record(other, nullptr)));
  EXPECT_TRUE(succeeded(eager, eager.event_query(other)));
}

TEST_F(sim_streams, SynchronizeCallsCompleteExactlyTheirScope) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  const stream_t elsewhere = new_stream(1);
  const event_t first = new_event();
  const event_t second = new_event();
  const event_t on_b = new_event();
  const event_t on_one = new_event(1);
  record(first, a);
  record(second, a);
  record(on_b, b);
  record(on_one, elsewhere);
  ASSERT_TRUE(ok(sim().event_synchronize(first)));
  EXPECT_TRUE(done(first));
  EXPECT_TRUE(pending(second)) << "event_synchronize completes up to the event only";
  ASSERT_TRUE(ok(sim().stream_synchronize(0, a)));
  EXPECT_TRUE(done(second));
  EXPECT_TRUE(pending(on_b));
  ASSERT_TRUE(ok(sim().device_synchronize(0)));
  EXPECT_TRUE(done(on_b));
  EXPECT_TRUE(pending(on_one)) << "device 1 was not synchronised";
  ASSERT_TRUE(ok(sim().device_synchronize(1)));
  EXPECT_TRUE(done(on_one));
}

TEST_F(sim_streams, WaitEventMakesLaterWorkDependOnTheEvent) {
  const stream_t producer = new_stream();
  const stream_t consumer = new_stream();
  const event_t produced = new_event();
  const event_t before_wait = new_event();
  const event_t after_wait = new_event();
  record(produced, producer);
  record(before_wait, consumer);
  ASSERT_TRUE(ok(sim().stream_wait_event(consumer, produced)));
  record(after_wait, consumer);
  ASSERT_TRUE(ok(sim().event_synchronize(before_wait)));
  EXPECT_TRUE(pending(produced)) << "work before the wait does not depend on the producer";
  sim().complete(consumer);
  EXPECT_TRUE(done(after_wait));
  EXPECT_TRUE(done(produced)) << "completing the consumer past the wait completed the producer";
}

TEST_F(sim_streams, WaitDependenciesChainAndCyclesTerminate) {
  const stream_t s1 = new_stream();
  const stream_t s2 = new_stream();
  const stream_t s3 = new_stream(1);  // waits work across devices too
  const event_t e1 = new_event();
  const event_t e2 = new_event();
  const event_t e3 = new_event(1);
  record(e1, s1);
  ASSERT_TRUE(ok(sim().stream_wait_event(s2, e1)));
  record(e2, s2);
  ASSERT_TRUE(ok(sim().stream_wait_event(s3, e2)));
  record(e3, s3);
  ASSERT_TRUE(ok(sim().stream_synchronize(1, s3)));
  EXPECT_TRUE(done(e1)) << "transitively";
  EXPECT_TRUE(done(e2));

  const event_t x = new_event();
  const event_t y = new_event();
  record(x, s1);
  record(y, s2);
  ASSERT_TRUE(ok(sim().stream_wait_event(s1, y)));
  ASSERT_TRUE(ok(sim().stream_wait_event(s2, x)));
  record(x, s1);
  record(y, s2);
  sim().complete_all();
  EXPECT_TRUE(done(x));
  EXPECT_TRUE(done(y));
}

TEST_F(sim_streams, WaitsOnUnrecordedOrOwnEventsAreNoOps) {
  const stream_t stream = new_stream();
  const event_t never = new_event();
  const event_t own = new_event();
  ASSERT_TRUE(ok(sim().stream_wait_event(stream, never)));
  record(own, stream);
  ASSERT_TRUE(ok(sim().stream_wait_event(stream, own)));
  const event_t later = new_event();
  record(later, stream);
  ASSERT_TRUE(ok(sim().event_synchronize(later)));
  EXPECT_TRUE(done(own));
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_wait_event(stream, reinterpret_cast<event_t>(0x99))));
}

TEST_F(sim_streams, LegacyStreamFollowsTheCurrentDevice) {
  const event_t on_zero = new_event(0);
  const event_t on_one = new_event(1);
  record(on_zero, nullptr);
  ASSERT_TRUE(ok(sim().set_device(1)));
  EXPECT_TRUE(fails(status::invalid_value, sim().event_record(on_zero, nullptr))) << "nullptr is device 1's now";
  record(on_one, nullptr);
  record(on_one, reinterpret_cast<stream_t>(1));  // cudaStreamLegacy
  sim().complete(nullptr);
  EXPECT_TRUE(done(on_one));
  EXPECT_TRUE(pending(on_zero));
  ASSERT_TRUE(ok(sim().stream_synchronize(0, nullptr))) << "with a device, nullptr is that device's";
  EXPECT_TRUE(done(on_zero));
}

TEST_F(sim_streams, PerThreadDefaultStreamsAreSeparate) {
  const auto per_thread = reinterpret_cast<stream_t>(2);  // cudaStreamPerThread
  const event_t mine = new_event();
  const event_t theirs = new_event();
  record(mine, per_thread);
  std::thread other([&] { EXPECT_TRUE(ok(sim().event_record(theirs, per_thread))); });
  other.join();
  sim().complete(per_thread);
  EXPECT_TRUE(done(mine));
  EXPECT_TRUE(pending(theirs)) << "the other thread's stream is another stream";
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_destroy(0, per_thread)));
  ASSERT_TRUE(ok(sim().device_synchronize(0)));
  EXPECT_TRUE(done(theirs));
}

TEST_F(sim_streams, DestroyingAStreamFinishesItsWork) {
  const stream_t stream = new_stream();
  const event_t event = new_event();
  record(event, stream);
  ASSERT_TRUE(ok(sim().stream_destroy(0, stream)));
  EXPECT_TRUE(done(event));
  EXPECT_TRUE(ok(sim().event_synchronize(event)));
}

TEST_F(sim_streams, DestroyedEventsAreInvalidEverywhere) {
  const event_t event = new_event();
  ASSERT_TRUE(ok(sim().event_destroy(0, event)));
  EXPECT_TRUE(fails(status::invalid_value, sim().event_query(event)));
  EXPECT_TRUE(fails(status::invalid_value, sim().event_synchronize(event)));
  EXPECT_TRUE(fails(status::invalid_value, sim().event_record(event, nullptr)));
  EXPECT_TRUE(fails(status::invalid_value, sim().event_destroy(0, event)));
  EXPECT_TRUE(fails(status::invalid_value, sim().stream_wait_event(nullptr, event)));
  EXPECT_NE(new_event(), event) << "handles are never reused";
  event_t none = nullptr;
  EXPECT_TRUE(fails(status::invalid_device, sim().event_create(-1, &none)));
  EXPECT_EQ(none, nullptr);
}

}  // namespace
}  // namespace streampool::testing
