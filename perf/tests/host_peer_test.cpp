// host_peer_test.cpp — the pinned host allocators of the harness on the sim driver: the registry
// entries (host only, never in the defaults, refused by the device commands), the `pinned` and
// `cudaHostAlloc` peers, torch-pinned refused without the plugin, and one host latency run with
// its copy loop.
#include <gtest/gtest.h>

#include "tests/bench_test_support.hpp"

#include "backend_registry.hpp"
#include "cli_common.hpp"
#include "host_latency.hpp"
#include "host_peers.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::bench {
namespace {

TEST(host_peers, RegistryEntriesAreHostOnlyAndNotDefaults) {
  for (const char* name : {"pinned", "cudaHostAlloc", "torch-pinned"}) {
    EXPECT_TRUE(is_host_backend(name)) << name;
    EXPECT_EQ(backend_registry().count(name), 1u) << name;
    for (const backend_spec& spec : default_backends(sim_choice())) EXPECT_NE(spec.name, name);
  }
  EXPECT_FALSE(is_host_backend("native"));
  auto sim = std::make_shared<sim_driver>();
  EXPECT_THROW((void)make_backend({"pinned", ""}, sim), usage_error);
  const auto specs = parse_backend_list("pinned=pinned_use_cuda_host_register:True,pinned_num_register_threads:8,cudaHostAlloc");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].config_text, "pinned_use_cuda_host_register:True,pinned_num_register_threads:8");
  EXPECT_THROW((void)parse_backend_list("pinned=pinned_num_register_threads:3"), usage_error);
  EXPECT_THROW((void)parse_backend_list("cudaHostAlloc=pinned_use_background_threads:True"), usage_error);
  EXPECT_THROW((void)selected_backends("torch-pinned", sim_choice()), usage_error);
}

TEST(host_peers, PinnedAndRawPeersAllocateRecordAndFree) {
  for (const char* name : {"pinned", "cudaHostAlloc"}) {
    auto sim = std::make_shared<sim_driver>();
    {
      std::unique_ptr<host_peer> peer = make_host_peer({name, ""}, sim);
      stream_t stream = nullptr;
      ASSERT_TRUE(sim->stream_create(0, &stream).ok());
      void* a = peer->allocate(4096);
      EXPECT_EQ(peer->leak_check().rfind("FAIL", 0), 0u) << name;
      peer->record_stream(a, stream);
      peer->deallocate(a);
      EXPECT_THROW(peer->deallocate(a), error) << name;
      EXPECT_EQ(peer->leak_check(), "ok") << name;
      EXPECT_EQ(peer->driver_allocations(), 1) << name;
    }
    EXPECT_EQ(sim->host_bytes_pinned(), 0u) << name;
  }
}

TEST(host_peers, LatencyRunWithCopyLoop) {
  latency_params params;
  params.size = 64 * 1024;
  params.depth = 2;
  params.threads = 2;
  params.iterations = 100;
  params.repeat = 2;
  for (const char* name : {"pinned", "cudaHostAlloc"}) {
    const host_latency_result r = measure_host_latency({name, ""}, sim_choice(), params, true);
    EXPECT_TRUE(r.pairs.error.empty()) << name << ": " << r.pairs.error;
    EXPECT_TRUE(r.copy_error.empty()) << name << ": " << r.copy_error;
    EXPECT_GT(r.pairs.ns_per_pair, 0.0) << name;
    EXPECT_GT(r.copy_ns_per_iter, 0.0) << name;
    EXPECT_GT(r.copy_gb_per_s, 0.0) << name;
    EXPECT_GT(r.cold_alloc_us, -1.0) << name;
    EXPECT_EQ(r.pairs.leak, "ok") << name;
  }
  const host_latency_result cached = measure_host_latency({"pinned", ""}, sim_choice(), params, false);
  EXPECT_EQ(cached.pairs.timed_device_mallocs, 0) << "cache hits pin nothing";
}

}  // namespace
}  // namespace streampool::bench
