// allocate_at_test.cpp — allocate_at on a real GPU (Note [Allocations at an address] in
// src/native/native_allocator.cpp): a private pool's freed allocation is made again at its address,
// between two live ones, and the memory works (a kernel fills it and the neighbours keep their data).
#include <tuple>
#include <vector>

#include "streampool_kernels.hpp"
#include "support/backend_fixture.hpp"
#include "support/kernel_ok.hpp"

namespace streampool::testing {
namespace {

using gpu_allocate_at = backend_test;

TEST_P(gpu_allocate_at, AFreedAllocationOfAPrivatePoolIsMadeAgainAtItsAddress) {
  const stream_t stream = new_stream();
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [stream](stream_t s) { return s == stream; });
  std::vector<void*> blocks;
  for (const std::size_t size : {3 * mib, 5 * mib, 2 * mib}) blocks.push_back(alloc_->allocate(size, stream));
  alloc_->end_allocate_to_pool(pool);
  KERNEL_OK(kernels::fill_pattern(blocks[0], 3 * mib, 11, stream));
  KERNEL_OK(kernels::fill_pattern(blocks[2], 2 * mib, 33, stream));
  void* middle = blocks[1];
  alloc_->deallocate(middle);
  void* again = alloc_->allocate_at(middle, 5 * mib, pool);
  ASSERT_EQ(again, middle);
  KERNEL_OK(kernels::fill_pattern(again, 5 * mib, 22, stream));
  synchronize();
  std::uint64_t bad = 0;
  for (const auto& [ptr, size, seed] : {std::tuple{blocks[0], 3 * mib, 11u}, std::tuple{again, 5 * mib, 22u},
                                         std::tuple{blocks[2], 2 * mib, 33u}}) {
    KERNEL_OK(kernels::count_mismatches(ptr, size, seed, stream, &bad));
    EXPECT_EQ(bad, 0u);
  }
  for (void* p : {blocks[0], again, blocks[2]}) alloc_->deallocate(p);
  alloc_->release_pool(pool);
  alloc_->empty_cache();
}

INSTANTIATE_TEST_SUITE_P(real_device, gpu_allocate_at,
                         ::testing::Values(backend_case{"native_cuda", "backend:native", true}), backend_case_name);

}  // namespace
}  // namespace streampool::testing
