// peer_test.cpp — the driver-level peers and the measurement paths on the sim driver: statistics,
// leak check, record_stream, a latency measurement and each workload finishing with no leak; the
// graphloop workload on every backend that can be captured; and the peers that need a real GPU
// (cub, torch-*) refused on the sim with their reasons.
#include <gtest/gtest.h>

#include "tests/bench_test_support.hpp"

#include "backend_registry.hpp"
#include "latency.hpp"
#include "peer_torch.hpp"
#include "streampool/sim_driver.hpp"
#include "workloads.hpp"

namespace streampool::bench {
namespace {

class peer_test : public ::testing::TestWithParam<const char*> {};

TEST_P(peer_test, StatsAndLeakCheck) {
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

TEST_P(peer_test, RecordStreamThenFree) {
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

TEST_P(peer_test, LatencyMeasurement) {
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

TEST_P(peer_test, WorkloadsLeaveNothingAllocated) {
  workload_params params;
  params.count = 200;
  params.steps = 3;
  params.layers = 1;
  params.hidden = 256;
  for (const char* name : {"random", "multistream", "trainloop", "graphloop"}) {
    const workload_result r = run_workload(find_workload(name), {GetParam(), ""}, sim_choice(), params);
    if (std::string(name) == "graphloop" && std::string(GetParam()) == "cuda") {
      EXPECT_NE(r.unsupported.find("capturing"), std::string::npos) << r.unsupported;
      EXPECT_EQ(r.ops, 0);  // not run at all
      continue;
    }
    EXPECT_EQ(r.unsupported, "") << name;
    EXPECT_EQ(r.error, "") << name;
    EXPECT_EQ(r.leak, "ok") << name;
    EXPECT_GT(r.ops, 0) << name;
    EXPECT_GE(r.peak_reserved, r.peak_allocated) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(peers, peer_test, ::testing::Values("cuda", "async-raw"),
                         [](const auto& param_info) { return std::string(param_info.param) == "cuda" ? "cuda" : "async_raw"; });

TEST(workloads, UnknownNameIsBadInput) {
  EXPECT_THROW((void)find_workload("nope"), usage_error);
  EXPECT_EQ(find_workload("graphloop").name, "graphloop");
}

class graphloop_test : public ::testing::TestWithParam<const char*> {};

// Capture on the sim succeeds only if nothing illegal was issued during it (Note [Sim capture
// sequences]), so a clean run also proves the backends' capture paths are capture-safe.
TEST_P(graphloop_test, CapturesReplaysAndLeavesNothingAllocated) {
  workload_params params;
  params.steps = 7;
  params.count = 6;
  params.graphs = 3;
  params.max_size = std::size_t{8} << 20;
  const workload_result r = run_workload(find_workload("graphloop"), {GetParam(), ""}, sim_choice(), params);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.unsupported, "");
  EXPECT_EQ(r.leak, "ok");
  EXPECT_EQ(r.replays, 7);
  EXPECT_GT(r.seconds_per_replay, 0.0);
  // warm-up + capture of 3 steps of 6 allocations, 3 freed at once and 3 at the end: 12 ops each
  EXPECT_EQ(r.ops, 2 * 3 * 12);
  EXPECT_GT(r.peak_requested, 0u);
  EXPECT_GE(r.peak_allocated, r.peak_requested);
  EXPECT_GE(r.peak_reserved, r.peak_allocated);
  EXPECT_GT(r.device_mallocs, 0);
}

INSTANTIATE_TEST_SUITE_P(backends, graphloop_test, ::testing::Values("native", "cudaMallocAsync", "async-raw"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(graphloop, ReplaysMakeNoAllocatorCalls) {
  // Only the warm-up and the captures allocate: 1 or 50 replays give the same ops and peaks.
  workload_params few, many;
  few.steps = 1;
  many.steps = 50;
  few.count = many.count = 6;
  few.max_size = many.max_size = std::size_t{8} << 20;
  const workload_def& def = find_workload("graphloop");
  for (const char* backend : {"native", "cudaMallocAsync"}) {
    const workload_result r1 = run_workload(def, {backend, ""}, sim_choice(), few);
    const workload_result r50 = run_workload(def, {backend, ""}, sim_choice(), many);
    ASSERT_EQ(r1.error, "") << backend;
    ASSERT_EQ(r50.error, "") << backend;
    EXPECT_EQ(r50.replays, 50) << backend;
    EXPECT_EQ(r1.ops, r50.ops) << backend;
    EXPECT_EQ(r1.device_mallocs, r50.device_mallocs) << backend;
    EXPECT_EQ(r1.peak_reserved, r50.peak_reserved) << backend;
  }
}

TEST(graphloop, PeersThatCannotCaptureSayWhy) {
  for (const char* name : {"cuda", "cub", "torch-native", "torch-async"}) {
    EXPECT_NE(graphloop_unsupported_reason(name), "") << name;
  }
  for (const char* name : {"native", "cudaMallocAsync", "async-raw"}) EXPECT_EQ(graphloop_unsupported_reason(name), "") << name;
}

driver_choice gpu_choice() {  // a choice that claims a real device (nothing here touches it)
  driver_choice choice;
  choice.sim = false;
  choice.why = "test";
  return choice;
}

TEST(real_gpu_peers, CubIsRefusedOnTheSim) {
  try {
    (void)selected_backends("cub", sim_choice());
    FAIL() << "cub accepted on the sim driver";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a real GPU"), std::string::npos) << e.what();
  }
  auto sim = std::make_shared<sim_driver>();
  EXPECT_THROW((void)make_backend({"cub", ""}, sim), error);
  EXPECT_EQ(backend_registry().at("cub").why_not(gpu_choice()), "");  // built here: runs on a GPU
}

TEST(real_gpu_peers, TorchPeersNeedThePlugin) {
  set_torch_peer_path("");
  for (const char* name : {"torch-native", "torch-async"}) {
    try {
      (void)selected_backends(name, gpu_choice());
      FAIL() << name << " accepted without a plugin";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("--torch-peer"), std::string::npos) << e.what();
    }
  }
}

TEST(real_gpu_peers, TorchPeersOnePerProcessAndLoadErrors) {
  set_torch_peer_path("/nonexistent/libstreampool_torch_peer.so");
  try {
    (void)selected_backends("torch-native,torch-async", gpu_choice());
    FAIL() << "both PyTorch peers accepted in one process";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("one process"), std::string::npos) << e.what();
  }
  try {
    (void)selected_backends("torch-native", gpu_choice());
    FAIL() << "a missing plugin loaded";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load '/nonexistent/libstreampool_torch_peer.so'"), std::string::npos)
        << e.what();
  }
  EXPECT_NE(torch_peer_why_not(sim_choice()).find("needs a real GPU"), std::string::npos);
  set_torch_peer_path("");
}

}  // namespace
}  // namespace streampool::bench
