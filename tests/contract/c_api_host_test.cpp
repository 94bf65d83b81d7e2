// c_api_host_test.cpp — the C entry points of the pinned host allocator on the simulated device:
// alloc / record_stream / free / empty_cache / stats / snapshot, stream-ordered reuse through the
// C API, and bad input (size 0, foreign pointer, double free, dead stream, init twice) that
// returns a status and a message.
#include <gtest/gtest.h>

#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

class c_api_host : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_host_uninstall();
    sim_options options;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    c_api_impl::c_api_host_install(make_host_allocator(parse_config("pinned_num_register_threads:2"), sim_));
  }
  void TearDown() override {
    (void)c_api_impl::c_api_host_uninstall();
    EXPECT_EQ(sim_->host_bytes_pinned(), 0u);
  }
  std::shared_ptr<sim_driver> sim_;
};

bool contains(const char* text, const std::string& part) {
  return text != nullptr && std::string(text).find(part) != std::string::npos;
}

TEST_F(c_api_host, AllocRecordFreeAndStreamOrderedReuse) {
  stream_t stream = nullptr;
  ASSERT_TRUE(sim_->stream_create(0, &stream).ok());
  void* device = nullptr;
  ASSERT_TRUE(sim_->malloc(0, 4096, &device).ok());
  void* a = streampool_host_alloc(3000);
  ASSERT_NE(a, nullptr) << streampool_last_error();
  ASSERT_TRUE(sim_->memcpy_async(device, a, 3000, stream).ok());
  EXPECT_EQ(streampool_host_record_stream(a, stream), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_EQ(streampool_host_free(a), STREAMPOOL_OK);
  void* b = streampool_host_alloc(4096);
  EXPECT_NE(b, a) << "the copy has not completed";
  sim_->complete(stream);
  void* c = streampool_host_alloc(4096);
  EXPECT_EQ(c, a);
  EXPECT_TRUE(contains(streampool_host_stats_json(), "\"allocation.current\":2"));
  EXPECT_TRUE(contains(streampool_host_snapshot_json(), "\"state\":\"in_use\""));
  EXPECT_EQ(streampool_host_free(b), STREAMPOOL_OK);
  EXPECT_EQ(streampool_host_free(c), STREAMPOOL_OK);
  EXPECT_EQ(streampool_host_empty_cache(), STREAMPOOL_OK);
  EXPECT_TRUE(contains(streampool_host_stats_json(), "\"reserved_bytes.current\":0"));
  (void)sim_->free(0, device);
}

TEST_F(c_api_host, BadInputGivesCodesAndMessages) {
  EXPECT_EQ(streampool_host_alloc(0), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "allocate(0)"));
  EXPECT_EQ(streampool_host_alloc(std::size_t{1} << 61), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_OUT_OF_MEMORY);
  int local = 0;
  EXPECT_EQ(streampool_host_free(&local), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "not a pointer this host allocator handed out"));
  EXPECT_EQ(streampool_host_record_stream(&local, nullptr), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  void* a = streampool_host_alloc(64);
  EXPECT_EQ(streampool_host_record_stream(a, reinterpret_cast<void*>(0x1234)), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "not a live stream"));
  EXPECT_EQ(streampool_host_free(a), STREAMPOOL_OK);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK);
  EXPECT_STREQ(streampool_last_error(), "");
  EXPECT_EQ(streampool_host_free(a), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "double free"));
  EXPECT_EQ(streampool_host_free(nullptr), STREAMPOOL_OK);
  EXPECT_EQ(streampool_host_init(nullptr), STREAMPOOL_ERROR_STATE);
}

TEST_F(c_api_host, BadConfigIsAConfigError) {
  (void)c_api_impl::c_api_host_uninstall();
  EXPECT_EQ(streampool_host_init("pinned_num_register_threads:3"), STREAMPOOL_ERROR_CONFIG);
  EXPECT_TRUE(contains(streampool_last_error(), "power of 2")) << streampool_last_error();
  c_api_impl::c_api_host_install(make_host_allocator(allocator_config{}, sim_));
}

}  // namespace
}  // namespace streampool
