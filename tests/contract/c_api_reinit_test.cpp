// c_api_reinit_test.cpp — issue 31: the C API's lifecycle as c_api.h says. Init fails with the
// CUDA status when no GPU is usable (Note [Init fails when it cannot work]); after a shutdown no
// call re-creates an allocator by itself, each fails with STREAMPOOL_ERROR_NOT_INITIALIZED (Note
// [Nothing re-creates the allocator after a shutdown]); re-initialising with another config
// while 8 threads keep calling is never refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

class c_api_reinit : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    // A factory that would succeed: a call that re-created an allocator after a shutdown would
    // go unnoticed without the checks below.
    c_api_impl::c_api_set_factory([] {
      return make_allocator(parse_config("backend:native"), std::make_shared<sim_driver>());
    });
  }
  void TearDown() override {
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_set_factory({});
  }
};

bool has_gpu() {
  int count = 0;
  return make_cuda_driver()->device_count(&count).ok() && count > 0;
}

TEST_F(c_api_reinit, InitWithTheCudaDriverFailsWithItsStatusWithoutAGpu) {
  if (has_gpu()) GTEST_SKIP() << "a GPU is usable here: init succeeds";
  c_api_impl::c_api_set_factory({});  // the real first-use path: the environment, the real driver
  EXPECT_EQ(streampool_init("backend:native"), STREAMPOOL_ERROR_CUDA);
  const std::string message = streampool_last_error();
  EXPECT_TRUE(message.find("cudaErrorNoDevice") != std::string::npos ||
              message.find("cudaErrorInsufficientDriver") != std::string::npos)
      << message;
  EXPECT_NE(message.find("no usable CUDA device"), std::string::npos) << message;
  EXPECT_NE(message.find("streampool_init_sim"), std::string::npos) << message;
  EXPECT_EQ(c_api_impl::c_api_uninstall(), nullptr) << "a failed init installs nothing";
  // The first call without init fails the same way, not later as a bad device argument.
  EXPECT_EQ(streampool_alloc(4096, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_CUDA) << streampool_last_error();
  EXPECT_EQ(c_api_impl::c_api_uninstall(), nullptr);
}

TEST_F(c_api_reinit, AfterShutdownNothingRecreatesTheAllocator) {
  void* p = streampool_alloc(4096, 0, nullptr);  // first use: created (by the factory)
  ASSERT_NE(p, nullptr) << streampool_last_error();
  streampool_free(p, 4096, 0, nullptr);
  ASSERT_EQ(streampool_shutdown(), STREAMPOOL_OK) << streampool_last_error();

  int host = 0;
  streampool_free(&host, 4, 0, nullptr);  // a stray free of an unknown pointer
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_NOT_INITIALIZED);
  EXPECT_NE(std::string(streampool_last_error()).find("call streampool_init or streampool_init_sim"),
            std::string::npos)
      << streampool_last_error();
  EXPECT_EQ(streampool_alloc(4096, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(streampool_stats_json(0), nullptr);
  EXPECT_EQ(streampool_backend_name(), nullptr);
  EXPECT_EQ(streampool_empty_cache(), STREAMPOOL_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(streampool_record_history(1, 10), STREAMPOOL_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK) << "a second shutdown has nothing to do";
  EXPECT_EQ(c_api_impl::c_api_uninstall(), nullptr) << "no call created an allocator";

  // c_api_uninstall reset the state: shut down again, then an explicit init opens it.
  ASSERT_EQ(streampool_shutdown(), STREAMPOOL_OK);
  EXPECT_EQ(streampool_alloc(4096, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_NOT_INITIALIZED);
  ASSERT_EQ(streampool_init_sim("backend:cudaMallocAsync", 1 * gib, 1), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_STREQ(streampool_backend_name(), "cudaMallocAsync");
  p = streampool_alloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr) << streampool_last_error();
  streampool_free(p, 4096, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK);
}

// The case: 8 threads running, 5 re-inits with another config (2 were refused: the
// threads' calls re-created the old allocator between shutdown and init).
TEST_F(c_api_reinit, ReinitWithAnotherConfigUnderLoadIsNeverRefused) {
  ASSERT_EQ(streampool_init_sim("backend:native", 1 * gib, 1), STREAMPOOL_OK) << streampool_last_error();
  std::atomic<bool> stop{false};
  std::atomic<long> failures{0};
  std::atomic<long> pairs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t size = 512 + 4096 * static_cast<std::size_t>(t);
      while (!stop.load()) {
        void* p = streampool_alloc(size, 0, nullptr);
        if (p == nullptr) {
          if (streampool_last_status() != STREAMPOOL_ERROR_NOT_INITIALIZED) ++failures;
        } else {
          streampool_free(p, size, 0, nullptr);
          if (streampool_last_status() != STREAMPOOL_OK) ++failures;
          ++pairs;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  }
  const char* configs[] = {"backend:cudaMallocAsync", "backend:native,expandable_segments:True"};
  for (int i = 0; i < 5; ++i) {
    int status = STREAMPOOL_ERROR_STATE;
    for (int attempt = 0; attempt < 100000 && status == STREAMPOOL_ERROR_STATE; ++attempt) {
      status = streampool_shutdown();  // refused while a thread holds an allocation: retry
      if (status == STREAMPOOL_ERROR_STATE) std::this_thread::yield();
    }
    ASSERT_EQ(status, STREAMPOOL_OK) << "shutdown " << i << ": " << streampool_last_error();
    const char* config = configs[i % 2];
    EXPECT_EQ(streampool_init_sim(config, 1 * gib, 1), STREAMPOOL_OK) << "re-init " << i << ": " << streampool_last_error();
    EXPECT_STREQ(streampool_backend_name(), i % 2 == 0 ? "cudaMallocAsync" : "native") << "re-init " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(pairs.load(), 0);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK) << streampool_last_error();
}

}  // namespace
}  // namespace streampool
