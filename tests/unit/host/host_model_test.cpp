// host_model_test.cpp — the model-based randomised test of the host allocator: random
// allocations, copies on several non-eager streams, frees, stream completions and empty_cache,
// under every pinned_* configuration, checked against host_model (no reuse before the copies
// complete, no overlap, contents kept, statistics consistent, nothing left pinned at the end).
// The seed is printed; STREAMPOOL_TEST_SEED replays a run.
#include <random>

#include "host_model_test_support.hpp"
#include "support/test_seed.hpp"

namespace streampool::test {
namespace {

class host_model_random : public ::testing::TestWithParam<const char*> {};

TEST_P(host_model_random, RandomOperationsKeepTheReuseRule) {
  std::mt19937_64 rng(testing::test_seed());
  sim_options options = lazy_streams();
  options.host_capacity = 256 * mib;
  host_env env(GetParam(), options);
  host_model model(env);
  void* device = env.device_buffer(4096);
  model.set_device_buffer(device);
  const std::vector<stream_t> streams = {model.add_stream(), model.add_stream(), model.add_stream()};
  const std::size_t sizes[] = {1, 100, 4096, 5000, 65536, 300000, 2 * mib};
  constexpr int operations = 2500 / host_work_divisor;
  for (int op = 0; op < operations; ++op) {
    const int what = static_cast<int>(rng() % 100);
    const std::vector<void*> live = model.live();
    if (what < 35 || live.empty()) {
      (void)model.allocate(sizes[rng() % std::size(sizes)] + rng() % 7);
    } else if (what < 60) {
      model.copy(live[rng() % live.size()], streams[rng() % streams.size()]);
    } else if (what < 85) {
      model.deallocate(live[rng() % live.size()]);
    } else if (what < 97) {
      model.complete(streams[rng() % streams.size()]);
    } else {
      env.alloc->empty_cache();
    }
    if (op % 100 == 0) model.check_stats();
    if (::testing::Test::HasFailure()) break;
  }
  model.free_all();
  model.complete_all();
  env.alloc->empty_cache();
  const host_memory_stats s = env.alloc->stats();
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  (void)env.sim->free(0, device);
}

INSTANTIATE_TEST_SUITE_P(configs, host_model_random,
                         ::testing::Values("", "pinned_use_cuda_host_register:True,pinned_num_register_threads:4",
                                           "pinned_reserve_segment_size_mb:1",
                                           "pinned_use_background_threads:True",
                                           "pinned_use_cuda_host_register:True,pinned_reserve_segment_size_mb:2,"
                                           "pinned_use_background_threads:True"));

}  // namespace
}  // namespace streampool::test
