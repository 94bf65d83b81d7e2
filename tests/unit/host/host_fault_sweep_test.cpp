// host_fault_sweep_test.cpp — fault injection at every driver call the host allocator makes:
// for each call and each position in a fixed scenario (allocations, copies on two non-eager
// streams, frees, completions, empty_cache), one failure (out of memory, or another error) is
// injected. Errors may surface, but the reuse rule must hold (host_model), the allocator must
// keep working, and nothing may stay pinned once it is destroyed.
#include "host_model_test_support.hpp"

namespace streampool::test {
namespace {

struct sweep_case {
  const char* config;
  driver_call call;
};

class host_fault_sweep : public ::testing::TestWithParam<sweep_case> {};

/// Runs the scenario; every allocator call may throw (the model is only updated on success).
void run_scenario(host_env& env, host_model& model, const std::vector<stream_t>& streams) {
  const std::size_t sizes[] = {64, 4096, 70000, 300000};
  for (int i = 0; i < 40; ++i) {
    void* p = nullptr;
    try {
      p = model.allocate(sizes[i % 4]);
    } catch (const std::bad_alloc&) {
    } catch (const error&) {
    }
    if (p != nullptr) {
      try {
        model.copy(p, streams[i % 2]);
      } catch (const error&) {
      }
      try {
        model.deallocate(p);
      } catch (const error&) {
      }
    }
    if (i % 5 == 4) model.complete(streams[(i / 5) % 2]);
    if (i % 13 == 12) {
      try {
        env.alloc->empty_cache();
      } catch (const error&) {
      }
    }
  }
}

TEST_P(host_fault_sweep, OneFailureAnywhereLosesNothing) {
  const sweep_case& c = GetParam();
  for (const status code : {status::out_of_memory, status::other}) {
    for (int skip = 0; skip < 40; skip += host_work_divisor) {
      SCOPED_TRACE(std::string(to_string(c.call)) + " fails after " + std::to_string(skip) + " calls with " +
                   std::string(to_string(code)));
      sim_options options = lazy_streams();
      options.host_capacity = 64 * mib;
      {
        host_env env(c.config, options);
        host_model model(env);
        void* device = env.device_buffer(4096);
        model.set_device_buffer(device);
        const std::vector<stream_t> streams = {model.add_stream(), model.add_stream()};
        env.sim->fail_next(c.call, 1, code, skip);
        run_scenario(env, model, streams);
        env.sim->clear_faults();
        // Still working after the failure.
        void* p = model.allocate(4096);
        model.deallocate(p);
        model.free_all();
        model.complete_all();
        env.alloc->empty_cache();
        model.check_stats();
        (void)env.sim->free(0, device);
      }  // ~host_env: nothing pinned is left
      if (::testing::Test::HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    calls, host_fault_sweep,
    ::testing::Values(sweep_case{"", driver_call::host_alloc}, sweep_case{"", driver_call::host_free},
                      sweep_case{"", driver_call::event_create}, sweep_case{"", driver_call::event_record},
                      sweep_case{"", driver_call::event_query}, sweep_case{"", driver_call::stream_get_device},
                      sweep_case{"pinned_use_cuda_host_register:True,pinned_num_register_threads:2",
                                 driver_call::host_register},
                      sweep_case{"pinned_use_cuda_host_register:True", driver_call::host_unregister},
                      sweep_case{"pinned_reserve_segment_size_mb:1", driver_call::host_alloc}),
    [](const ::testing::TestParamInfo<sweep_case>& param_info) {
      return std::string(to_string(param_info.param.call)) + "_" + std::to_string(param_info.index);
    });

}  // namespace
}  // namespace streampool::test
