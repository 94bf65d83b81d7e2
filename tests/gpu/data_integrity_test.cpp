// data_integrity_test.cpp — on a real GPU, for every backend: data written through each returned
// pointer survives other allocations (no overlap), and a block still read by another stream is not
// handed out again before that stream's work is done (record_stream).
#include <random>
#include <vector>

#include "streampool_kernels.hpp"
#include "support/backend_fixture.hpp"
#include "support/kernel_ok.hpp"

namespace streampool::testing {
namespace {

using gpu_data = backend_test;

TEST_P(gpu_data, PatternsSurviveRandomAllocationChurn) {
  const stream_t s = new_stream();
  struct live { void* ptr; std::size_t size; std::uint32_t seed; };
  std::vector<live> blocks;
  std::mt19937 rng(42);
  std::uint32_t seed = 1;
  for (int i = 0; i < 2000; ++i) {
    if (!blocks.empty() && rng() % 5 < 2) {
      const std::size_t k = rng() % blocks.size();
      alloc_->deallocate(blocks[k].ptr);
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    const std::size_t size = rng() % 4 == 0 ? 1 + rng() % (24 * mib) : 1 + rng() % (64 * kib);
    void* p = alloc_->allocate(size, s);
    KERNEL_OK(kernels::fill_pattern(p, size, ++seed, s));
    blocks.push_back({p, size, seed});
  }
  for (const live& b : blocks) {
    std::uint64_t bad = 0;
    KERNEL_OK(kernels::count_mismatches(b.ptr, b.size, b.seed, s, &bad));
    EXPECT_EQ(bad, 0u) << "block of " << b.size << " bytes was overwritten";
  }
  for (const live& b : blocks) alloc_->deallocate(b.ptr);
}

TEST_P(gpu_data, BlockReadByAnotherStreamIsNotReusedEarly) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  constexpr std::size_t size = 4 * mib;
  void* src = alloc_->allocate(size, a);
  void* dst = alloc_->allocate(size, b);
  KERNEL_OK(kernels::fill_pattern(src, size, 1234, a));
  synchronize();
  // Stream b reads src after ~50 ms; meanwhile src is freed on a and a new block is written there.
  KERNEL_OK(kernels::delayed_copy(dst, src, size, 50000, b));
  alloc_->record_stream(src, b);
  alloc_->deallocate(src);
  void* reuse = alloc_->allocate(size, a);
  KERNEL_OK(kernels::fill_pattern(reuse, size, 999, a));
  synchronize();
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(dst, size, 1234, b, &bad));
  EXPECT_EQ(bad, 0u) << "stream b read memory that was reused before its work finished";
  alloc_->deallocate(reuse);
  alloc_->deallocate(dst);
}

INSTANTIATE_TEST_SUITE_P(real_device, gpu_data, ::testing::ValuesIn(backend_cases(true)), backend_case_name);

}  // namespace
}  // namespace streampool::testing
