// capture_reuse_test.cpp — graph_capture_record_stream_reuse:True (Note [Reuse within a capture]
// in src/native/capture_reuse.hpp) on the sim, whose captures record a dependency graph (Note [Sim
// capture graph]): a block freed during a capture after record_stream on a side stream is reused
// by the same capture once the side stream was joined back, not before; without the key, or with
// a use on a stream outside the capture, or when the graph cannot be read, it waits for the end of
// the capture; a block of the general pool is never reused within the capture.
#include <gtest/gtest.h>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

class capture_reuse_test : public ::testing::Test {
 protected:
  void make(const char* conf) {
    env_ = std::make_unique<native_env>(conf);
    main_ = env_->new_stream();
    side_ = env_->new_stream();
    ASSERT_TRUE(env_->sim->event_create(0, &fork_).ok());
    ASSERT_TRUE(env_->sim->event_create(0, &join_).ok());
  }
  void TearDown() override {
    if (env_ == nullptr) return;
    (void)env_->sim->event_destroy(0, fork_);
    (void)env_->sim->event_destroy(0, join_);
  }

  /// begin_allocate_to_pool for the two streams, a global capture on main_, side_ forked from it.
  void begin() {
    pool_ = allocator::create_pool_id();
    const stream_t main = main_;
    const stream_t side = side_;
    env_->alloc->begin_allocate_to_pool(pool_, [main, side](stream_t s) { return s == main || s == side; });
    ASSERT_TRUE(env_->sim->stream_begin_capture(main_, capture_mode::global).ok());
    ASSERT_TRUE(env_->sim->event_record(fork_, main_).ok());
    ASSERT_TRUE(env_->sim->stream_wait_event(side_, fork_).ok());
  }
  /// Joins side_ back into main_.
  void join() {
    ASSERT_TRUE(env_->sim->event_record(join_, side_).ok());
    ASSERT_TRUE(env_->sim->stream_wait_event(main_, join_).ok());
  }
  void end() {
    graph_t graph = nullptr;
    EXPECT_TRUE(env_->sim->stream_end_capture(main_, &graph).ok()) << "the capture was invalidated";
    env_->alloc->end_allocate_to_pool(pool_);
    if (graph != nullptr) {
      EXPECT_TRUE(env_->sim->graph_destroy(graph).ok());
    }
    env_->alloc->release_pool(pool_);
  }
  /// A block of the capture used on main_ and then, recorded, on side_; freed on main_.
  void* used_on_both_and_freed() {
    void* x = env_->alloc->allocate(MiB, main_);
    EXPECT_TRUE(env_->sim->memset_async(0, x, 1, MiB, main_).ok());
    env_->alloc->record_stream(x, side_);
    EXPECT_TRUE(env_->sim->memset_async(0, x, 2, MiB, side_).ok());
    env_->alloc->deallocate(x);
    return x;
  }

  /// After the join, the next allocation on main_ does not get `freed`; then the capture ends.
  void expect_not_reused_then_end(void* freed, const char* why) {
    void* after = env_->alloc->allocate(MiB, main_);
    EXPECT_NE(after, freed) << why;
    env_->alloc->deallocate(after);
    end();
  }

  std::unique_ptr<native_env> env_;
  stream_t main_ = nullptr;
  stream_t side_ = nullptr;
  event_t fork_ = nullptr;
  event_t join_ = nullptr;
  mempool_id pool_{};
};

TEST_F(capture_reuse_test, ReusedWithinTheCaptureOnceTheSideStreamIsJoinedBack) {
  make("graph_capture_record_stream_reuse:True");
  begin();
  void* x = used_on_both_and_freed();
  void* before = env_->alloc->allocate(MiB, main_);
  EXPECT_NE(before, x) << "the side stream's use is not ordered before main's next work yet";
  join();
  void* after = env_->alloc->allocate(MiB, main_);
  EXPECT_EQ(after, x) << "joined: the graph orders every use of x before main's next work";
  env_->alloc->deallocate(before);
  env_->alloc->deallocate(after);
  end();
  env_->alloc->empty_cache();
  EXPECT_EQ(env_->stats().allocation[0].current, 0);
  EXPECT_EQ(env_->sim->bytes_in_use(0), 0u);
}

// The walk of the graph is kept per stream and capture: allocations that find nothing new to
// look at make no graph queries (one walk per capture, not one per allocation).
TEST_F(capture_reuse_test, TheGraphIsWalkedOnlyThroughNewNodes) {
  make("graph_capture_record_stream_reuse:True");
  begin();
  (void)used_on_both_and_freed();
  std::vector<void*> more{env_->alloc->allocate(MiB, main_)};
  const std::uint64_t queries = env_->calls(driver_call::graph_node_dependencies);
  EXPECT_GT(queries, 0u);
  for (int i = 0; i < 10; ++i) more.push_back(env_->alloc->allocate(MiB, main_));
  EXPECT_EQ(env_->calls(driver_call::graph_node_dependencies), queries) << "the same nodes walked again";
  for (void* p : more) env_->alloc->deallocate(p);
  join();
  end();
}

TEST_F(capture_reuse_test, WithoutTheKeyTheBlockWaitsForTheEndOfTheCapture) {
  make("");
  begin();
  void* x = used_on_both_and_freed();
  join();
  expect_not_reused_then_end(x, "without the key the block waits for the end of the capture");
  env_->alloc->empty_cache();
  EXPECT_EQ(env_->sim->bytes_in_use(0), 0u);
}

TEST_F(capture_reuse_test, AUseOnAStreamOutsideTheCaptureWaitsForItsEnd) {
  make("graph_capture_record_stream_reuse:True");
  begin();
  const stream_t outside = env_->new_stream();
  void* x = env_->alloc->allocate(MiB, main_);
  env_->alloc->record_stream(x, outside);  // not capturing: no marker can be taken there
  env_->alloc->deallocate(x);
  join();
  expect_not_reused_then_end(x, "a use outside the capture: no marker");
}

TEST_F(capture_reuse_test, AGraphThatCannotBeReadLeavesTheBlockParked) {
  make("graph_capture_record_stream_reuse:True");
  begin();
  void* x = used_on_both_and_freed();
  join();
  env_->sim->fail_next(driver_call::graph_node_dependencies, 1, status::other);
  env_->sim->fail_next(driver_call::capture_dependencies, 1, status::other);
  expect_not_reused_then_end(x, "unsure: the block stays parked");
  env_->alloc->empty_cache();
  EXPECT_EQ(env_->sim->bytes_in_use(0), 0u) << "the parked block came back at the end of the capture";
}

TEST_F(capture_reuse_test, ABlockOfTheGeneralPoolIsNotReusedWithinTheCapture) {
  make("graph_capture_record_stream_reuse:True");
  void* x = env_->alloc->allocate(MiB, main_);  // before the capture: the general pool
  begin();
  env_->alloc->record_stream(x, side_);
  env_->alloc->deallocate(x);
  join();
  expect_not_reused_then_end(x, "a block of the general pool waits for the end of the capture");
}

}  // namespace
}  // namespace streampool::test
