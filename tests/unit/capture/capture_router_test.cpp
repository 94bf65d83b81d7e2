// capture_router_test.cpp — the capture router on its own (src/capture/capture_router.hpp):
// newest-first routing, the capture-underway count, use counts and the errors of begin / end /
// release, the rule for the id of a released pool (Note [Released pools]), and parked frees
// (Note [Parked frees]), including parking from several threads at once, and the one word the hot
// paths read (Note [Slow-entry word]): holds, and fields written under different locks at once.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "capture/capture_router.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

/// A pool's memory as a test backend sees it: how many arenas it made.
struct test_memory {
  int arenas = 0;
};
using router = capture::capture_router<test_memory, int>;

stream_t stream(std::uintptr_t n) { return reinterpret_cast<stream_t>(n); }
stream_filter only(stream_t s) {
  return [s](stream_t t) { return t == s; };
}
stream_filter any() {
  return [](stream_t) { return true; };
}
const mempool_id a{0, 1};
const mempool_id b{0, 2};

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

TEST(capture_router, RoutesToTheNewestRecordingWhoseFilterAcceptsTheStream) {
  router r(0);
  EXPECT_FALSE(r.underway());
  EXPECT_EQ(r.route(stream(10)), nullptr) << "no recording: the default pool";
  r.begin(a, only(stream(10)));
  r.begin(b, any());
  EXPECT_TRUE(r.underway());
  ASSERT_NE(r.route(stream(10)), nullptr);
  EXPECT_EQ(r.route(stream(10))->id, b) << "the newest recording is asked first";
  EXPECT_EQ(r.route(stream(11))->id, b);
  r.end(b);
  EXPECT_EQ(r.route(stream(10))->id, a);
  EXPECT_EQ(r.route(stream(11)), nullptr) << "no filter accepts it";
  r.end(a);
  EXPECT_FALSE(r.underway());
  EXPECT_FALSE(r.slow_entry());
}

TEST(capture_router, BeginCreatesOrSharesAPoolAndCountsItsUses) {
  router r(0);
  router::pool_type& created = r.begin(a, any());
  created.memory.arenas = 3;  // what the backend keeps stays with the pool
  EXPECT_EQ(r.use_count(a), 1);
  r.end(a);
  EXPECT_EQ(r.use_count(a), 1) << "end keeps the use";
  router::pool_type& shared = r.begin(a, any());
  EXPECT_EQ(&shared, &created) << "a second capture into the pool shares it";
  EXPECT_EQ(shared.memory.arenas, 3);
  EXPECT_EQ(r.use_count(a), 2);
  r.end(a);
  r.release(a);
  EXPECT_EQ(r.use_count(a), 1);
  EXPECT_FALSE(r.has_freeable());
  r.release(a);
  EXPECT_EQ(r.use_count(a), 0);
  EXPECT_TRUE(r.has_freeable());
  EXPECT_EQ(r.use_count(b), 0) << "unknown";
}

TEST(capture_router, MisuseGetsAnErrorThatNamesThePoolAndTheDeviceAndChangesNothing) {
  router r(3);
  r.begin(a, only(stream(1)));
  std::string message = error_of([&] { r.begin(a, any()); });
  EXPECT_NE(message.find("already recording to pool {0,1} on device 3"), std::string::npos) << message;
  EXPECT_EQ(r.use_count(a), 1) << "the refused begin counted no use";
  EXPECT_EQ(r.route(stream(2)), nullptr) << "and added no recording";
  r.end(a);
  message = error_of([&] { r.end(a); });
  EXPECT_NE(message.find("end_allocate_to_pool: not currently recording to pool {0,1} on device 3"),
            std::string::npos)
      << message;
  message = error_of([&] { r.release(b); });
  EXPECT_NE(message.find("release_pool: unknown pool {0,2} on device 3"), std::string::npos) << message;
  r.release(a);
  message = error_of([&] { r.release(a); });
  EXPECT_NE(message.find("release_pool: pool {0,1} on device 3 was already released"), std::string::npos)
      << message;
  EXPECT_FALSE(r.underway());
}

TEST(capture_router, AReleasedPoolIsRefusedUntilTheBackendLetsItGo) {
  router r(0);
  r.begin(a, any());
  r.end(a);
  r.release(a);
  const std::string message = error_of([&] { r.begin(a, any()); });
  EXPECT_NE(message.find("was released (use count 0)"), std::string::npos) << message;
  EXPECT_NE(message.find("create_pool_id()"), std::string::npos) << "says what to do: " << message;
  EXPECT_FALSE(r.underway());
  int offered = 0;
  r.forget_released([&](router::pool_type& pool) {
    ++offered;
    EXPECT_EQ(pool.id, a);
    return false;  // memory still in use
  });
  EXPECT_EQ(offered, 1);
  EXPECT_NE(error_of([&] { r.begin(a, any()); }), "no error") << "still known, still refused";
  r.forget_released([](router::pool_type&) { return true; });
  EXPECT_FALSE(r.has_freeable());
  router::pool_type& fresh = r.begin(a, any());  // forgotten: the id starts a new pool
  EXPECT_EQ(fresh.use_count, 1);
  EXPECT_EQ(fresh.memory.arenas, 0);
  r.end(a);
}

TEST(capture_router, PoolsInUseOrBeingRecordedToAreNotOffered) {
  router r(0);
  r.begin(a, any());
  r.release(a);  // released while still recording (a user may release before ending)
  r.begin(b, any());
  r.end(b);  // in use, not recording
  int offered = 0;
  r.forget_released([&](router::pool_type&) {
    ++offered;
    return true;
  });
  EXPECT_EQ(offered, 0);
  r.end(a);
  r.forget_released([&](router::pool_type& pool) {
    ++offered;
    EXPECT_EQ(pool.id, a);
    return true;
  });
  EXPECT_EQ(offered, 1);
  EXPECT_EQ(r.use_count(b), 1);
}

TEST(capture_router, ParkedFreesComeBackInOrderOnceNoRecordingIsUnderway) {
  router r(0);
  r.begin(a, any());
  r.defer(1);
  r.defer(2);
  EXPECT_TRUE(r.has_deferred());
  EXPECT_TRUE(r.take_deferred().empty()) << "nothing comes back while a recording is underway";
  std::vector<int> seen;
  r.for_each_deferred([&](int item) { seen.push_back(item); });
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  r.end(a);
  EXPECT_TRUE(r.slow_entry()) << "parked frees still need the slow path";
  std::vector<int> taken = r.take_deferred();
  EXPECT_EQ(taken, (std::vector<int>{1, 2}));
  EXPECT_FALSE(r.has_deferred());
  EXPECT_FALSE(r.slow_entry());
  r.defer(3);                                 // a free parked meanwhile
  r.keep_deferred({2});                       // one the backend could not complete
  EXPECT_EQ(r.take_deferred(), (std::vector<int>{2, 3})) << "the kept one goes first";
  r.keep_deferred({});
  EXPECT_FALSE(r.has_deferred());
}

TEST(capture_router, FreesParkedBySeveralThreadsAreAllKept) {
  router r(0);
  r.begin(a, any());
  constexpr int threads = 4;
  constexpr int per_thread = 2000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&r, t] {
      for (int i = 0; i < per_thread; ++i) r.defer(t * per_thread + i);
    });
  }
  for (std::thread& w : workers) w.join();
  r.end(a);
  std::vector<int> taken = r.take_deferred();
  ASSERT_EQ(taken.size(), std::size_t{threads * per_thread});
  std::vector<bool> seen(taken.size(), false);
  for (const int item : taken) seen[static_cast<std::size_t>(item)] = true;
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_TRUE(seen[i]) << "lost free " << i;
}

TEST(capture_router, AHoldForcesTheSlowEntryAndLeavesTheOtherFieldsAlone) {
  router r(0);
  r.hold();
  EXPECT_TRUE(r.slow_entry());
  EXPECT_TRUE(r.held());
  EXPECT_FALSE(r.underway());
  EXPECT_FALSE(r.has_deferred());
  r.hold();  // holds nest
  r.begin(a, any());
  r.defer(1);
  r.release_hold();
  EXPECT_TRUE(r.held());
  r.end(a);
  EXPECT_EQ(r.take_deferred(), (std::vector<int>{1}));
  EXPECT_FALSE(r.underway());
  EXPECT_FALSE(r.has_deferred());
  EXPECT_TRUE(r.slow_entry()) << "one hold is left";
  r.release_hold();
  EXPECT_FALSE(r.held());
  EXPECT_FALSE(r.slow_entry());
}

// The recordings and holds change under the caller's serialisation, the parked bit under the
// deferred-free lock: two threads at once. A field written by a plain load and store of the word
// would lose the other thread's changes.
TEST(capture_router, FieldsWrittenUnderDifferentLocksAtOnceAreNotLost) {
  router r(0);
  constexpr int rounds = 20000;
  std::thread recorder([&r] {
    for (int i = 0; i < rounds; ++i) {
      r.begin(a, any());
      r.hold();
      r.end(a);
      r.release_hold();
    }
  });
  std::thread parker([&r] {
    for (int i = 0; i < rounds; ++i) {
      r.defer(i);
      if (!r.has_deferred()) ADD_FAILURE() << "parked free not shown";
      (void)r.take_deferred_if([](int) { return true; });
    }
  });
  recorder.join();
  parker.join();
  EXPECT_FALSE(r.underway());
  EXPECT_FALSE(r.has_deferred());
  EXPECT_FALSE(r.held());
  EXPECT_FALSE(r.slow_entry());
  r.begin(b, any());
  r.hold();
  r.defer(7);
  EXPECT_TRUE(r.underway() && r.held() && r.has_deferred());
  r.end(b);
  r.release_hold();
  EXPECT_FALSE(r.underway());
  EXPECT_FALSE(r.held());
  EXPECT_TRUE(r.has_deferred());
}

}  // namespace
}  // namespace streampool::testing
