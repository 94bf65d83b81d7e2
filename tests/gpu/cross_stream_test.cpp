// cross_stream_test.cpp — cross_stream_reuse:True on a real GPU, kernel-verified: a block that
// stream A's slow kernel still writes (or reads) is handed to stream B, which writes its own data
// at once; after everything finished B's data must be intact (A's late write came first) and A
// must have read the old data. Also with expandable segments, where the growth moves the free
// pages of A's block while A's kernel still writes them: the old mapping stays for A, the growth
// maps the same pages at B's new block, and B waits for A's fence on the device, not the host
// (Note [Moving pages still in use]). Without the fence wait the late kernel would corrupt B's
// data; the tests check the block was really reused, so they cannot pass vacuously.
#include <vector>

#include "streampool_kernels.hpp"
#include "support/backend_fixture.hpp"
#include "support/kernel_ok.hpp"

namespace streampool::testing {
namespace {

using gpu_cross_stream = backend_test;

constexpr std::size_t size = 8 * mib;
constexpr std::uint32_t late_us = 50000;  // A's kernel starts its copy after ~50 ms

TEST_P(gpu_cross_stream, LateWriteOnAnotherStreamLandsBeforeTheNewOwnersData) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  void* src = alloc_->allocate(size, a);
  KERNEL_OK(kernels::fill_pattern(src, size, 1234, a));
  void* block = alloc_->allocate(size, a);
  // A writes `block` late, then the program frees it on A at once (host side, as PyTorch does).
  KERNEL_OK(kernels::delayed_copy(block, src, size, late_us, a));
  alloc_->deallocate(block);
  void* taken = alloc_->allocate(size, b);
  ASSERT_EQ(taken, block) << "the policy must hand A's block to B for this test to mean anything";
  EXPECT_GE(alloc_->stats(0).num_cross_stream_reuses, 1);
  KERNEL_OK(kernels::fill_pattern(taken, size, 999, b));
  synchronize();
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(taken, size, 999, b, &bad));
  EXPECT_EQ(bad, 0u) << "A's late write overwrote B's data: B was not ordered after A";
  alloc_->deallocate(taken);
  alloc_->deallocate(src);
}

TEST_P(gpu_cross_stream, LateReadOnAnotherStreamSeesTheOldData) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  void* block = alloc_->allocate(size, a);
  void* out = alloc_->allocate(size, a);
  KERNEL_OK(kernels::fill_pattern(block, size, 1234, a));
  KERNEL_OK(kernels::delayed_copy(out, block, size, late_us, a));  // A reads `block` late
  alloc_->deallocate(block);
  void* taken = alloc_->allocate(size, b);
  ASSERT_EQ(taken, block);
  KERNEL_OK(kernels::fill_pattern(taken, size, 999, b));
  synchronize();
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(out, size, 1234, a, &bad));
  EXPECT_EQ(bad, 0u) << "A read B's data: the block was reused before A's read";
  alloc_->deallocate(taken);
  alloc_->deallocate(out);
}

TEST_P(gpu_cross_stream, MovedPagesAreOrderedAfterTheKernelsStillUsingThem) {
  if (GetParam().config.find("expandable") == std::string::npos) GTEST_SKIP() << "pages move with expandable segments";
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  void* src = alloc_->allocate(size, a);
  KERNEL_OK(kernels::fill_pattern(src, size, 1234, a));
  void* hole = alloc_->allocate(size, a);
  void* keep = alloc_->allocate(size, a);
  KERNEL_OK(kernels::delayed_copy(hole, src, size, late_us, a));  // A writes `hole` late
  alloc_->deallocate(hole);
  // More than the hole: the growth moves the hole's pages (A's kernel still writes them).
  void* big = alloc_->allocate(size + 4 * mib, b);
  EXPECT_GE(alloc_->stats(0).num_moved_pages, 1);
  EXPECT_EQ(alloc_->stats(0).num_fence_host_waits, 0) << "the host did not wait for A's 50 ms kernel";
  KERNEL_OK(kernels::fill_pattern(big, size + 4 * mib, 77, b));
  synchronize();
  std::uint64_t bad = 0;
  KERNEL_OK(kernels::count_mismatches(big, size + 4 * mib, 77, b, &bad));
  EXPECT_EQ(bad, 0u);
  KERNEL_OK(kernels::count_mismatches(src, size, 1234, a, &bad));
  EXPECT_EQ(bad, 0u);
  for (void* p : {src, keep, big}) alloc_->deallocate(p);
}

std::vector<backend_case> cross_stream_cases() {
  return {{"cross_stream_cuda", "cross_stream_reuse:True", true},
          {"cross_stream_expandable_cuda", "cross_stream_reuse:True,expandable_segments:True", true}};
}

INSTANTIATE_TEST_SUITE_P(real_device, gpu_cross_stream, ::testing::ValuesIn(cross_stream_cases()), backend_case_name);

}  // namespace
}  // namespace streampool::testing
