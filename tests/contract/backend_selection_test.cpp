// backend_selection_test.cpp — make_allocator() picks the backend named by the environment:
// STREAMPOOL_ALLOC_CONF, or with it unset PYTORCH_CUDA_ALLOC_CONF (then PYTORCH_ALLOC_CONF), so an
// existing `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync` switches streampool with no code change.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "streampool/allocator.hpp"
#include "streampool/sim_driver.hpp"
#include "support/env_guard.hpp"

namespace streampool::testing {
namespace {


std::string backend_from_env() {
  const std::unique_ptr<allocator> alloc = make_allocator(config_from_env(), std::make_shared<sim_driver>());
  alloc->deallocate(alloc->allocate(1000));  // the chosen backend serves requests
  return std::string(alloc->backend_name());
}

TEST(backend_selection, DefaultIsNative) {
  env_guard guard;
  EXPECT_EQ(backend_from_env(), "native");
}

TEST(backend_selection, StreampoolVariableSelectsCudaMallocAsync) {
  env_guard guard;
  ::setenv("STREAMPOOL_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  EXPECT_EQ(backend_from_env(), "cudaMallocAsync");
}

TEST(backend_selection, PyTorchCudaVariableSelectsCudaMallocAsyncWhenOursIsUnset) {
  env_guard guard;
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  EXPECT_EQ(backend_from_env(), "cudaMallocAsync");
}

TEST(backend_selection, PyTorchAllocVariableIsReadLast) {
  env_guard guard;
  ::setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  EXPECT_EQ(backend_from_env(), "cudaMallocAsync");
}

TEST(backend_selection, StreampoolVariableWins) {
  env_guard guard;
  ::setenv("STREAMPOOL_ALLOC_CONF", "backend:native", 1);
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  EXPECT_EQ(backend_from_env(), "native");
}

TEST(backend_selection, CudaMallocAsyncBuildsWithoutPoolSupport) {
  // The device is checked at first use, so make_allocator works on any machine.
  sim_options options;
  options.memory_pools_supported = false;
  const std::unique_ptr<allocator> alloc =
      make_allocator(parse_config("backend:cudaMallocAsync"), std::make_shared<sim_driver>(options));
  EXPECT_EQ(alloc->backend_name(), "cudaMallocAsync");
  EXPECT_THROW((void)alloc->allocate(100), error);
}

}  // namespace
}  // namespace streampool::testing
