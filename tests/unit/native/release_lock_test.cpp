// release_lock_test.cpp — release_lock_on_cudamalloc:True (Note [Releasing the locks around
// cudaMalloc] in segment_source.cpp): while one thread is inside cudaMalloc (held there by the
// sim's call gate), other threads allocate from the cache on the same stream, take new segments on
// other streams, read statistics and empty the cache; without the key the same cache hit waits for
// the cudaMalloc. TSan runs these (the sanitizer stage runs every sim-labelled test).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

using namespace std::chrono_literals;

/// Runs an allocation on a thread of its own and holds that thread inside every cudaMalloc it
/// makes until open(); the destructor opens the gate and joins the thread.
class held_allocation {
 public:
  held_allocation(native_env& env, stream_t stream, std::size_t bytes) : sim_(*env.sim) {
    sim_.set_call_gate(driver_call::malloc, [this] {
      if (std::this_thread::get_id() != held_.load()) return;
      entered_.store(true);
      while (!open_.load()) std::this_thread::sleep_for(1ms);
    });
    std::promise<void*> promise;
    result_ = promise.get_future();
    thread_ = std::thread([this, &env, stream, bytes, promise = std::move(promise)]() mutable {
      held_.store(std::this_thread::get_id());
      try {
        promise.set_value(env.alloc->allocate(bytes, stream));
      } catch (...) {
        promise.set_exception(std::current_exception());
      }
    });
  }
  ~held_allocation() {
    open();
    thread_.join();
    sim_.set_call_gate(driver_call::malloc, {});
  }
  held_allocation(const held_allocation&) = delete;
  held_allocation& operator=(const held_allocation&) = delete;

  /// Waits until the thread is inside cudaMalloc.
  [[nodiscard]] bool entered() const {
    for (int i = 0; i < 10000 && !entered_.load(); ++i) std::this_thread::sleep_for(1ms);
    return entered_.load();
  }
  void open() { open_.store(true); }
  [[nodiscard]] bool done() const { return result_.wait_for(0ms) == std::future_status::ready; }
  /// Opens the gate and returns the allocation. @throws what allocate threw
  [[nodiscard]] void* get() {
    open();
    return result_.get();
  }

 private:
  sim_driver& sim_;
  std::atomic<std::thread::id> held_{};
  std::atomic<bool> entered_{false};
  std::atomic<bool> open_{false};
  std::future<void*> result_;
  std::thread thread_;
};

TEST(release_lock_on_cudamalloc, OtherThreadsAllocateWhileOneIsInsideCudaMalloc) {
  native_env env("release_lock_on_cudamalloc:True");
  const stream_t stream = env.new_stream();
  const stream_t other = env.new_stream();
  env.alloc->deallocate(env.alloc->allocate(MiB, stream));  // a cached block for the hit below
  held_allocation held(env, stream, 40 * MiB);
  ASSERT_TRUE(held.entered());

  // Meanwhile, from another thread: a cache hit on the same stream, a new segment on another
  // stream, statistics, a snapshot and empty_cache. With the locks held these would wait until
  // the held cudaMalloc returns (and it does not, until the gate opens below).
  std::future<void*> meanwhile = std::async(std::launch::async, [&] {
    void* hit = env.alloc->allocate(MiB, stream);
    void* fresh = env.alloc->allocate(30 * MiB, other);
    EXPECT_EQ(env.stats().allocation[0].current, 2);
    (void)env.alloc->snapshot();
    env.alloc->deallocate(fresh);
    env.alloc->empty_cache();
    return hit;
  });
  const bool finished = meanwhile.wait_for(20s) == std::future_status::ready;
  const bool still_held = !held.done();
  void* big = held.get();  // opens the gate
  EXPECT_TRUE(finished) << "other threads waited for a cudaMalloc made with release_lock_on_cudamalloc:True";
  EXPECT_TRUE(still_held);
  void* hit = meanwhile.get();
  ASSERT_NE(big, nullptr);
  memory_stats s = env.stats();
  EXPECT_EQ(s.allocation[0].current, 2);
  EXPECT_EQ(s.segment[0].current, 2);  // the hit's small segment and the held 40 MiB one
  EXPECT_EQ(static_cast<std::size_t>(s.reserved_bytes[0].current), env.sim->bytes_in_use(0));
  env.alloc->deallocate(hit);
  env.alloc->deallocate(big);
  env.alloc->empty_cache();
  s = env.stats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(release_lock_on_cudamalloc, WithoutTheKeyACacheHitOnTheStreamWaitsForTheCudaMalloc) {
  native_env env;
  const stream_t stream = env.new_stream();
  env.alloc->deallocate(env.alloc->allocate(MiB, stream));
  held_allocation held(env, stream, 40 * MiB);
  ASSERT_TRUE(held.entered());
  std::future<void*> hit = std::async(std::launch::async, [&] { return env.alloc->allocate(MiB, stream); });
  EXPECT_EQ(hit.wait_for(100ms), std::future_status::timeout) << "the stream's lock is held during cudaMalloc";
  void* big = held.get();
  void* p = hit.get();
  env.alloc->deallocate(p);
  env.alloc->deallocate(big);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

// A failed cudaMalloc with the locks released: the OOM ladder goes on under the locks taken again
// (release everything cached, retry), and the error names the request.
TEST(release_lock_on_cudamalloc, AnOutOfMemoryRetryAndErrorWorkWithTheLocksReleased) {
  sim_options options;
  options.capacity = 64 * MiB;
  native_env env("release_lock_on_cudamalloc:True", options);
  const stream_t stream = env.new_stream();
  void* keep = env.alloc->allocate(40 * MiB, stream);
  env.alloc->deallocate(env.alloc->allocate(20 * MiB, env.new_stream()));  // cached on another stream
  void* again = env.alloc->allocate(20 * MiB, stream);  // fits only once the other stream's cache is freed
  EXPECT_EQ(env.stats().num_alloc_retries, 1);
  EXPECT_THROW((void)env.alloc->allocate(40 * MiB, stream), out_of_memory);
  env.alloc->deallocate(again);
  env.alloc->deallocate(keep);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

}  // namespace
}  // namespace streampool::test
