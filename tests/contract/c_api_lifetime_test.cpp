// c_api_lifetime_test.cpp — the C API's allocator under concurrent calls and shutdowns (Note [C API
// allocator lifetime], src/c_api/c_api.cpp): threads allocate, free, read statistics and empty the cache
// while the main thread shuts the allocator down again and again. A shutdown either finds
// allocations live (a state error; nothing destroyed) or destroys the allocator with no call
// inside it; the main thread then installs the next one with another config (streampool_init_sim),
// which never fails: no call re-creates an allocator after a shutdown (Note [Nothing re-creates the
// allocator after a shutdown]); between the two, calls fail with STREAMPOOL_ERROR_NOT_INITIALIZED
// and change nothing. Every allocation that succeeds is freed by the allocator that made it. Run
// under ThreadSanitizer in the TSan build.
// Also: a free whose size, device or stream differ from the allocation's frees it anyway and
// reports the mismatch once (Note [Mismatched free]).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"
#include "support/warnings_scope.hpp"

namespace streampool {
namespace {

class c_api_lifetime : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_set_factory([] {
      sim_options o;
      o.capacity = 1 * gib;
      return make_allocator(parse_config("backend:native"), std::make_shared<sim_driver>(o));
    });
  }
  void TearDown() override {
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_set_factory({});
  }
};

TEST_F(c_api_lifetime, ShutdownUnderConcurrentCallsNeverDestroysAnAllocatorInUse) {
  std::atomic<bool> stop{false};
  std::atomic<long> failures{0};
  std::atomic<long> pairs{0};
  std::atomic<long> not_initialized{0};
  // A failure is one unless it says that no allocator is installed (between shutdown and init).
  const auto failed = [&] {
    if (streampool_last_status() == STREAMPOOL_ERROR_NOT_INITIALIZED) ++not_initialized;
    else ++failures;
  };
  // Every other shutdown is made while the allocating threads hold nothing (they park between
  // pairs), so it must destroy the allocator while the statistics thread keeps calling in; the
  // others race with allocations in flight and may find one live (a state error).
  std::atomic<bool> park{false};
  std::atomic<int> parked{0};
  constexpr int allocating_threads = 3;
  std::vector<std::thread> threads;
  for (int t = 0; t < allocating_threads; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t size = 1000 + 4096 * static_cast<std::size_t>(t);
      while (!stop.load()) {
        if (park.load()) {
          ++parked;
          while (park.load() && !stop.load()) std::this_thread::yield();
          --parked;
          continue;
        }
        void* p = streampool_alloc(size, 0, nullptr);
        if (p == nullptr) {
          failed();
          continue;
        }
        streampool_free(p, size, 0, nullptr);
        if (streampool_last_status() != STREAMPOOL_OK) ++failures;  // a live allocation: never shut down
        ++pairs;
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop.load()) {
      if (streampool_stats_json(0) == nullptr) failed();
      if (streampool_backend_name() == nullptr) failed();
      if (streampool_empty_cache() != STREAMPOOL_OK) failed();
    }
  });
  int destroyed = 0;
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    const bool quiet = i % 2 == 1;
    if (quiet) {
      park = true;
      while (parked.load() != allocating_threads) std::this_thread::yield();
    }
    const int status = streampool_shutdown();
    if (status == STREAMPOOL_OK) ++destroyed;
    else if (status == STREAMPOOL_ERROR_STATE && !quiet) ++refused;
    else ADD_FAILURE() << "shutdown " << i << (quiet ? " (nothing live)" : "") << ": " << status << " "
                       << streampool_last_error();
    if (status == STREAMPOOL_OK) {
      // Re-init with another config: never refused, whatever the other threads call meanwhile.
      const char* config = i % 4 < 2 ? "backend:native,expandable_segments:True" : "backend:native";
      EXPECT_EQ(streampool_init_sim(config, 1 * gib, 1), STREAMPOOL_OK)
          << "re-init " << i << " under load: " << streampool_last_error();
    }
    park = false;
    std::this_thread::yield();
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << "a call failed while the allocator was shut down around it";
  EXPECT_GT(pairs.load(), 0);
  EXPECT_GE(destroyed, 20) << "every shutdown with nothing live destroys the allocator (" << refused << " refused)";
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK) << streampool_last_error();
}

TEST_F(c_api_lifetime, AMismatchedFreeFreesAndIsReportedOnce) {
  testing::warnings_scope warnings;
  void* a = streampool_alloc(4096, 0, nullptr);
  void* b = streampool_alloc(8192, 0, nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  streampool_free(a, 100, 0, nullptr);  // wrong size
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << "freed: " << streampool_last_error();
  streampool_free(b, 8192, 0, reinterpret_cast<void*>(0x1234));  // wrong stream
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK);
  const std::vector<std::string> reported = warnings.containing("streampool_free(");
  ASSERT_EQ(reported.size(), 1u) << "reported once";
  const std::string& message = reported[0];
  EXPECT_NE(message.find("size 100"), std::string::npos) << message;
  EXPECT_NE(message.find("made with size 4096"), std::string::npos) << message;
  EXPECT_NE(message.find("freed anyway"), std::string::npos) << message;
  EXPECT_NE(std::string(streampool_stats_json(0)).find("\"allocated_bytes.all.current\":0"), std::string::npos)
      << "both blocks were freed: nothing leaks";
  streampool_free(a, 4096, 0, nullptr);  // now a double free: still an error
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK);
}

}  // namespace
}  // namespace streampool
