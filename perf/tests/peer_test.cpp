// peer_test.cpp — the driver-level peers and the measurement paths on the sim driver: statistics,
// leak check, record_stream, a latency measurement and each workload finishing with no leak.
#include <gtest/gtest.h>

#include "backend_registry.hpp"
#include "latency.hpp"
#include "streampool/sim_driver.hpp"
#include "workloads.hpp"

namespace streampool::bench {
namespace {

driver_choice sim_choice() {
  driver_choice choice;
  choice.sim = true;
  choice.why = "test";
  choice.sim_capacity = std::size_t{8} << 30;
  return choice;
}

class PeerTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PeerTest, StatsAndLeakCheck) {
  auto sim = std::make_shared<sim_driver>();
  std::unique_ptr<allocator> alloc = make_backend({GetParam(), ""}, sim);
  void* a = alloc->allocate(1 << 20, nullptr, 0);
  void* b = alloc->allocate(4096, nullptr, 0);
  memory_stats s = alloc->stats(0);
  EXPECT_EQ(s.allocated_bytes[0].current, (1 << 20) + 4096);
  EXPECT_GE(s.reserved_bytes[0].current, s.allocated_bytes[0].current);
  EXPECT_GE(s.num_device_alloc, 1);
  EXPECT_NE(leak_check(*alloc, 0), "ok");
  alloc->deallocate(a);
  EXPECT_THROW(alloc->deallocate(a), error);  // double free: an error, state unchanged
  alloc->deallocate(b);
  EXPECT_EQ(leak_check(*alloc, 0), "ok");
  EXPECT_EQ(alloc->stats(0).allocated_bytes[0].peak, (1 << 20) + 4096);
}

TEST_P(PeerTest, RecordStreamThenFree) {
  auto sim = std::make_shared<sim_driver>();
  std::unique_ptr<allocator> alloc = make_backend({GetParam(), ""}, sim);
  stream_t s1 = nullptr, s2 = nullptr;
  ASSERT_TRUE(sim->stream_create(0, &s1).ok());
  ASSERT_TRUE(sim->stream_create(0, &s2).ok());
  void* p = alloc->allocate(1 << 20, s1, 0);
  alloc->record_stream(p, s2);
  alloc->deallocate(p);
  EXPECT_EQ(leak_check(*alloc, 0), "ok");
  alloc.reset();
  EXPECT_TRUE(sim->stream_destroy(0, s1).ok());
  EXPECT_TRUE(sim->stream_destroy(0, s2).ok());
}

TEST_P(PeerTest, LatencyMeasurement) {
  latency_params params;
  params.size = 4096;
  params.depth = 2;
  params.threads = 2;
  params.iterations = 200;
  params.repeat = 2;
  const latency_result r = measure_latency({GetParam(), ""}, sim_choice(), params);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.leak, "ok");
  EXPECT_GT(r.ns_per_pair, 0.0);
  EXPECT_GT(r.pairs_per_second, 0.0);
  EXPECT_GE(r.iterations, 16);
}

TEST_P(PeerTest, WorkloadsLeaveNothingAllocated) {
  workload_params params;
  params.count = 200;
  params.steps = 3;
  params.layers = 1;
  params.hidden = 256;
  for (const char* name : {"random", "multistream", "trainloop"}) {
    const workload_result r = run_workload(find_workload(name), {GetParam(), ""}, sim_choice(), params);
    EXPECT_EQ(r.error, "") << name;
    EXPECT_EQ(r.leak, "ok") << name;
    EXPECT_GT(r.ops, 0) << name;
    EXPECT_GE(r.peak_reserved, r.peak_allocated) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Peers, PeerTest, ::testing::Values("cuda", "async-raw"),
                         [](const auto& param_info) { return std::string(param_info.param) == "cuda" ? "cuda" : "async_raw"; });

TEST(Workloads, GraphloopIsListedButUnavailable) {
  EXPECT_THROW((void)find_workload("graphloop"), usage_error);
  EXPECT_THROW((void)find_workload("nope"), usage_error);
}

}  // namespace
}  // namespace streampool::bench
