// c_api_test.cpp — the C entry points on the simulated device: PyTorch's pluggable-allocator
// signatures, and bad input (null, foreign pointer, double free, mismatched free arguments) that
// returns an error code and a message, never an exception or a crash.
#include <gtest/gtest.h>

#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

class c_api : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    c_api_impl::c_api_install(make_allocator(parse_config("backend:native"), std::make_shared<sim_driver>()));
  }
  void TearDown() override { (void)c_api_impl::c_api_uninstall(); }
};

TEST_F(c_api, AllocFreeRoundTripWithPyTorchSignatures) {
  void* p = streampool_alloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr) << streampool_last_error();
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK);
  const std::string stats = streampool_stats_json(0);
  EXPECT_NE(stats.find("\"requested_bytes.all.current\":1000"), std::string::npos) << stats;
  streampool_free(p, 1000, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_NE(std::string(streampool_stats_json(-1)).find("\"allocated_bytes.all.current\":0"), std::string::npos);
  EXPECT_STREQ(streampool_backend_name(), "native");
}

TEST_F(c_api, SizeZeroIsNullWithoutError) {
  EXPECT_EQ(streampool_alloc(0, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK);
}

TEST_F(c_api, BadInputGivesCodesAndMessages) {
  int host = 0;
  streampool_free(&host, 4, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(streampool_last_error()).find("was not allocated by streampool_alloc"), std::string::npos);

  void* p = streampool_alloc(64, 0, nullptr);
  streampool_free(p, 65, 0, nullptr);  // wrong size: freed anyway, reported once (c_api_lifetime_test)
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK);
  streampool_free(p, 64, 0, nullptr);  // double free
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);

  EXPECT_EQ(streampool_record_stream(nullptr, nullptr), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_record_stream(&host, nullptr), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_set_memory_fraction(2.0, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(streampool_last_error()).find("[0.0, 1.0]"), std::string::npos);
  EXPECT_EQ(streampool_alloc(16, 7, nullptr), nullptr);  // no device 7
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_stats_json(7), nullptr);
}

TEST_F(c_api, OutOfMemoryIsAStatusNotACrash) {
  EXPECT_EQ(streampool_alloc(std::size_t{1} << 62, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(streampool_last_error()).find("Tried to allocate"), std::string::npos);
  void* p = streampool_alloc(512, 0, nullptr);
  EXPECT_NE(p, nullptr);
  streampool_free(p, 512, 0, nullptr);
}

TEST_F(c_api, InitTwiceAndShutdownWithLiveMemoryAreStateErrors) {
  EXPECT_EQ(streampool_init("backend:native"), STREAMPOOL_ERROR_STATE);
  void* p = streampool_alloc(512, 0, nullptr);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_ERROR_STATE);
  EXPECT_NE(std::string(streampool_last_error()).find("still live"), std::string::npos);
  streampool_free(p, 512, 0, nullptr);
  EXPECT_EQ(streampool_empty_cache(), STREAMPOOL_OK);
  EXPECT_EQ(streampool_shutdown(), STREAMPOOL_OK);
  EXPECT_EQ(c_api_impl::c_api_uninstall(), nullptr);
}

TEST_F(c_api, BadConfigIsAConfigError) {
  (void)c_api_impl::c_api_uninstall();
  EXPECT_EQ(streampool_init("max_split_size_mb:2"), STREAMPOOL_ERROR_CONFIG);
  EXPECT_NE(std::string(streampool_last_error()).find("max_split_size_mb"), std::string::npos);
}

TEST_F(c_api, SnapshotIsJson) {
  void* p = streampool_alloc(2048, 0, nullptr);
  const std::string snap = streampool_snapshot_json();
  EXPECT_EQ(snap.rfind("{\"segments\":[", 0), 0u) << snap;
  EXPECT_NE(snap.find("\"requested_size\":2048"), std::string::npos);
  streampool_free(p, 2048, 0, nullptr);
}

}  // namespace
}  // namespace streampool
