// c_api_trace_test.cpp — the C entry points of src/c_api/c_api_trace.cpp on the simulated device:
// resetting peaks and cumulative counters, recording and exporting the trace, the device count,
// and streampool_init_sim (including its refusals), each with its error status and message.
#include <gtest/gtest.h>

#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

namespace streampool {
namespace {

bool contains(const char* text, const std::string& needle) {
  return text != nullptr && std::string(text).find(needle) != std::string::npos;
}

class c_api_trace : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)c_api_impl::c_api_uninstall();
    ASSERT_EQ(streampool_init_sim("backend:native", 0, 2), STREAMPOOL_OK) << streampool_last_error();
  }
  void TearDown() override { (void)c_api_impl::c_api_uninstall(); }
};

TEST_F(c_api_trace, ResetPeakStatsLowersThePeakToTheCurrentValue) {
  void* big = streampool_alloc(8 << 20, 0, nullptr);
  ASSERT_NE(big, nullptr) << streampool_last_error();
  streampool_free(big, 8 << 20, 0, nullptr);
  EXPECT_TRUE(contains(streampool_stats_json(0), "\"allocated_bytes.all.peak\":8388608"));
  EXPECT_EQ(streampool_reset_peak_stats(0), STREAMPOOL_OK);
  EXPECT_TRUE(contains(streampool_stats_json(0), "\"allocated_bytes.all.peak\":0"));
  EXPECT_TRUE(contains(streampool_stats_json(0), "\"allocation.all.allocated\":1"));
  EXPECT_EQ(streampool_reset_accumulated_stats(0), STREAMPOOL_OK);
  EXPECT_TRUE(contains(streampool_stats_json(0), "\"allocation.all.allocated\":0"));
  EXPECT_EQ(streampool_reset_peak_stats(5), STREAMPOOL_ERROR_INVALID_ARGUMENT);  // no device 5
  EXPECT_FALSE(std::string(streampool_last_error()).empty());
  EXPECT_EQ(streampool_reset_accumulated_stats(5), STREAMPOOL_ERROR_INVALID_ARGUMENT);
}

TEST_F(c_api_trace, RecordedTraceIsInTheCsvAndTheSnapshot) {
  EXPECT_STREQ(streampool_trace_csv(0), "action,addr,size,stream,time_us\n");  // off: header only
  ASSERT_EQ(streampool_record_history(1, 100), STREAMPOOL_OK) << streampool_last_error();
  void* p = streampool_alloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  streampool_free(p, 1000, 0, nullptr);
  const std::string csv = streampool_trace_csv(0);
  EXPECT_NE(csv.find("segment_alloc,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("alloc," + std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ",1000,0,"), std::string::npos)
      << csv;
  EXPECT_NE(csv.find("free_completed,"), std::string::npos) << csv;
  EXPECT_TRUE(contains(streampool_snapshot_json(), "\"action\":\"alloc\""));
  // Device 1 allocated nothing; it has only the event of the snapshot just taken.
  const std::string other = streampool_trace_csv(1);
  EXPECT_EQ(other.rfind("action,addr,size,stream,time_us\nsnapshot,0,0,0,", 0), 0u) << other;
  EXPECT_EQ(other.find("alloc"), std::string::npos) << other;
  EXPECT_EQ(streampool_trace_csv(9), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_INVALID_ARGUMENT);

  // Off discards what was kept.
  ASSERT_EQ(streampool_record_history(0, 0), STREAMPOOL_OK);
  EXPECT_STREQ(streampool_trace_csv(0), "action,addr,size,stream,time_us\n");
}

TEST_F(c_api_trace, RingBufferKeepsTheLastEntries) {
  ASSERT_EQ(streampool_record_history(1, 3), STREAMPOOL_OK);
  for (int i = 0; i < 5; ++i) {
    void* p = streampool_alloc(512, 0, nullptr);
    ASSERT_NE(p, nullptr);
    streampool_free(p, 512, 0, nullptr);
  }
  const std::string csv = streampool_trace_csv(0);
  int lines = 0;
  for (char c : csv) lines += c == '\n' ? 1 : 0;
  EXPECT_EQ(lines, 1 + 3) << csv;
}

TEST_F(c_api_trace, RecordHistoryRefusesZeroEntries) {
  EXPECT_EQ(streampool_record_history(1, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "max_entries must be at least 1"));
}

TEST_F(c_api_trace, DeviceCountIsTheSimulatedOne) {
  int count = 0;
  EXPECT_EQ(streampool_device_count(&count), STREAMPOOL_OK);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(streampool_device_count(nullptr), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "count is NULL"));
}

TEST_F(c_api_trace, InitSimRefusesASecondAllocatorAndBadArguments) {
  EXPECT_EQ(streampool_init_sim(nullptr, 0, 1), STREAMPOOL_ERROR_STATE);
  EXPECT_TRUE(contains(streampool_last_error(), "already installed"));
  (void)c_api_impl::c_api_uninstall();
  EXPECT_EQ(streampool_init_sim(nullptr, 0, 0), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(streampool_last_error(), "device_count 0 is out of range"));
  EXPECT_EQ(streampool_init_sim(nullptr, 0, 65), STREAMPOOL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(streampool_init_sim("max_split_size_mb:banana", 0, 1), STREAMPOOL_ERROR_CONFIG);
  // A small capacity is honoured: more than it holds is out of memory.
  ASSERT_EQ(streampool_init_sim("backend:native", 64 << 20, 1), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_EQ(streampool_alloc(128 << 20, 0, nullptr), nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_ERROR_OUT_OF_MEMORY);
  EXPECT_STREQ(streampool_backend_name(), "native");
}

TEST_F(c_api_trace, InitSimTakesTheAsyncBackend) {
  (void)c_api_impl::c_api_uninstall();
  ASSERT_EQ(streampool_init_sim("backend:cudaMallocAsync", 0, 1), STREAMPOOL_OK) << streampool_last_error();
  EXPECT_STREQ(streampool_backend_name(), "cudaMallocAsync");
  void* p = streampool_alloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr) << streampool_last_error();
  streampool_free(p, 4096, 0, nullptr);
  EXPECT_EQ(streampool_last_status(), STREAMPOOL_OK) << streampool_last_error();
}

}  // namespace
}  // namespace streampool
