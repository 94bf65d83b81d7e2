// c_api_sleep_test.cpp — the C entry points of sleep and wake (src/c_api/c_api_sleep.cpp) on the
// simulated device: the default pool of an allocator with expandable segments sleeps and wakes,
// allocation fails while it sleeps, the state reads as JSON, and each misuse gets its status and
// one message.
#include <gtest/gtest.h>

#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"

namespace streampool {
namespace {

bool contains(const char* text, const std::string& needle) {
  return text != nullptr && std::string(text).find(needle) != std::string::npos;
}

class c_api_sleep : public ::testing::Test {
 protected:
  void SetUp() override { (void)c_api_impl::c_api_uninstall(); }
  void TearDown() override { (void)c_api_impl::c_api_uninstall(); }
};

TEST_F(c_api_sleep, TheDefaultPoolSleepsAndWakes) {
  ASSERT_EQ(streampool_init_sim("backend:native,expandable_segments:True", 0, 1), STREAMPOOL_OK)
      << streampool_last_error();
  void* p = streampool_alloc(4 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr) << streampool_last_error();
  EXPECT_TRUE(contains(streampool_sleep_state_json(0, 0, 0), "\"asleep\":false"));
  ASSERT_EQ(streampool_sleep(0, 0, 0, STREAMPOOL_SLEEP_OFFLOAD, 1), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_TRUE(contains(streampool_sleep_state_json(0, 0, 0), "\"asleep\":true"));
  EXPECT_TRUE(contains(streampool_sleep_state_json(0, 0, 0), "\"offloaded_bytes\":4194304"));
  EXPECT_EQ(streampool_alloc(512, 0, nullptr), nullptr);
  EXPECT_TRUE(contains(streampool_last_error(), "asleep"));
  EXPECT_EQ(streampool_sleep(0, 0, 0, STREAMPOOL_SLEEP_OFFLOAD, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "already asleep"));
  ASSERT_EQ(streampool_wake(0, 0, 0), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_TRUE(contains(streampool_sleep_state_json(0, 0, 0), "\"backup_bytes\":4194304")) << "kept";
  EXPECT_EQ(streampool_wake(0, 0, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "not asleep"));
  streampool_free(p, 4 << 20, 0, nullptr);
}

TEST_F(c_api_sleep, BadArgumentsAreRefused) {
  ASSERT_EQ(streampool_init_sim("backend:native", 0, 1), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_EQ(streampool_sleep(0, 0, 0, 9, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "STREAMPOOL_SLEEP_OFFLOAD"));
  EXPECT_EQ(streampool_sleep(0, 0, 42, STREAMPOOL_SLEEP_DISCARD, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "unknown"));
  EXPECT_EQ(streampool_sleep_state_json(3, 0, 0), nullptr);  // no device 3
  void* p = streampool_alloc(1 << 20, 0, nullptr);
  EXPECT_EQ(streampool_sleep(0, 0, 0, STREAMPOOL_SLEEP_OFFLOAD, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "expandable_segments:True")) << "cudaMalloc segments";
  streampool_free(p, 1 << 20, 0, nullptr);
}

TEST_F(c_api_sleep, TheAsyncBackendSaysWhyItCannot) {
  ASSERT_EQ(streampool_init_sim("backend:cudaMallocAsync", 0, 1), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_NE(streampool_sleep(0, 0, 0, STREAMPOOL_SLEEP_OFFLOAD, 0), STREAMPOOL_OK);
  EXPECT_TRUE(contains(streampool_last_error(), "cudaMallocAsync"));
}

}  // namespace
}  // namespace streampool
