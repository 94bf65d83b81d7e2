// async_env_selection_test.cpp — the cudaMallocAsync backend chosen from the environment:
// STREAMPOOL_ALLOC_CONF, or with it unset PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF, through
// config_from_env() and async::make_async_allocator (the make_allocator() path, which also needs
// the native backend, is covered by tests/contract/backend_selection_test.cpp), plus the warning
// for keys only the native backend reads (docs/pytorch-compatibility.md §1.3).
#include <array>
#include <cstdlib>
#include <optional>
#include <string>

#include "async_test_support.hpp"
#include "support/env_guard.hpp"

namespace streampool::testing {
namespace {


std::unique_ptr<allocator> from_env() {
  return async::make_async_allocator(config_from_env(), std::make_shared<sim_driver>());
}

TEST(async_env_selection, StreampoolVariable) {
  env_guard guard;
  ::setenv("STREAMPOOL_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  const allocator_config config = config_from_env();
  EXPECT_EQ(config.backend, backend_kind::cuda_malloc_async);
  EXPECT_EQ(config.source_variable, "STREAMPOOL_ALLOC_CONF");
  const std::unique_ptr<allocator> alloc = from_env();
  EXPECT_EQ(alloc->backend_name(), "cudaMallocAsync");
  alloc->deallocate(alloc->allocate(100));  // and it works
}

TEST(async_env_selection, PyTorchCudaVariableWhenOursIsUnset) {
  env_guard guard;
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  const allocator_config config = config_from_env();
  EXPECT_EQ(config.backend, backend_kind::cuda_malloc_async);
  EXPECT_EQ(config.source_variable, "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(from_env()->backend_name(), "cudaMallocAsync");
}

TEST(async_env_selection, PyTorchAllocVariableLast) {
  env_guard guard;
  ::setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  EXPECT_EQ(from_env()->backend_name(), "cudaMallocAsync");
}

TEST(async_env_selection, OursTakesPrecedence) {
  env_guard guard;
  ::setenv("STREAMPOOL_ALLOC_CONF", "backend:native", 1);
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  EXPECT_EQ(config_from_env().backend, backend_kind::native);
}

TEST(async_env_selection, EnvSettingsReachTheBackend) {
  env_guard guard;
  ::setenv("STREAMPOOL_ALLOC_CONF", "backend:cudaMallocAsync,async_pool:dedicated,per_process_memory_fraction:0.25",
           1);
  auto sim = std::make_shared<sim_driver>();
  const std::unique_ptr<allocator> alloc = async::make_async_allocator(config_from_env(), sim);
  alloc->deallocate(alloc->allocate(100));
  EXPECT_EQ(sim->calls(driver_call::pool_create), 1u);
  EXPECT_DOUBLE_EQ(alloc->memory_fraction(0), 0.25);
}

TEST(async_env_selection, NativeOnlyKeysAreWarnedAbout) {
  const allocator_config config =
      parse_config("backend:cudaMallocAsync,max_split_size_mb:100,roundup_power2_divisions:4");
  ASSERT_FALSE(config.warnings.empty());
  const std::string& warning = config.warnings.front();
  EXPECT_NE(warning.find("backend:cudaMallocAsync ignores"), std::string::npos) << warning;
  EXPECT_NE(warning.find("max_split_size_mb"), std::string::npos) << warning;
  EXPECT_NE(warning.find("roundup_power2_divisions"), std::string::npos) << warning;
  // Keys this backend reads are not warned about.
  EXPECT_TRUE(parse_config("backend:cudaMallocAsync,per_process_memory_fraction:0.5,async_pool:dedicated")
                  .warnings.empty());
}

}  // namespace
}  // namespace streampool::testing
