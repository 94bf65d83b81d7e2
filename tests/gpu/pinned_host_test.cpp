// pinned_host_test.cpp — the pinned host allocator on a real GPU (label gpu): a freed block that a
// slow cudaMemcpyAsync still reads is not handed out to the next allocation of the same size, and
// the data the copy delivers is the data the block held at the free, checked byte for byte; the
// same for a copy loop that frees and reuses buffers while copies are in flight; under every
// pinned_* configuration (cudaHostAlloc, cudaHostRegister with 8 threads, the background thread,
// a reserve segment).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "streampool/host_allocator.hpp"
#include "streampool_kernels.hpp"
#include "support/kernel_ok.hpp"

namespace streampool::testing {
namespace {

std::uint8_t pattern_byte(std::size_t i, std::uint32_t seed) {
  return static_cast<std::uint8_t>((i * 2654435761u + seed * 40503u) >> 7);
}

void fill(void* ptr, std::size_t bytes, std::uint32_t seed) {
  auto* p = static_cast<std::uint8_t*>(ptr);
  for (std::size_t i = 0; i < bytes; ++i) p[i] = pattern_byte(i, seed);
}

std::size_t mismatches(const std::vector<std::uint8_t>& data, std::size_t offset, std::size_t bytes,
                       std::uint32_t seed) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < bytes; ++i) bad += data[offset + i] != pattern_byte(i, seed);
  return bad;
}

class gpu_pinned : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    drv_ = make_cuda_driver();
    int count = 0;
    if (!drv_->device_count(&count).ok() || count == 0) {
      GTEST_SKIP() << "no CUDA device on this machine (the pinned host tests need a real GPU)";
    }
    check(*drv_, drv_->set_device(0), "set_device");
    check(*drv_, drv_->stream_create(0, &stream_), "stream_create");
    alloc_ = make_host_allocator(parse_config(GetParam()), drv_);
  }
  void TearDown() override {
    alloc_.reset();
    for (void* p : device_) (void)drv_->free(0, p);
    if (stream_ != nullptr) (void)drv_->stream_destroy(0, stream_);
  }
  void* device_buffer(std::size_t bytes) {
    void* p = nullptr;
    check(*drv_, drv_->malloc(0, bytes, &p), "cudaMalloc");
    device_.push_back(p);
    return p;
  }
  /// [src, src + bytes) of device memory, copied to the host after the stream's work.
  std::vector<std::uint8_t> read_back(const void* src, std::size_t bytes) {
    std::vector<std::uint8_t> out(bytes);
    check(*drv_, drv_->memcpy_async(out.data(), src, bytes, stream_), "cudaMemcpyAsync D2H");
    check(*drv_, drv_->stream_synchronize(0, stream_), "cudaStreamSynchronize");
    return out;
  }

  std::shared_ptr<driver> drv_;
  stream_t stream_ = nullptr;
  std::unique_ptr<host_allocator> alloc_;
  std::vector<void*> device_;
};

TEST_P(gpu_pinned, ASlowCopyStillReadsTheFreedBlockWhileTheNextAllocationAsksForTheSameSize) {
  constexpr std::size_t size = 16 * mib;
  void* dst = device_buffer(size);
  void* scratch_src = device_buffer(1 * mib);
  void* scratch_dst = device_buffer(1 * mib);
  void* block = alloc_->allocate(size);
  fill(block, size, 1234);
  // The stream is busy for ~200 ms, then the copy reads the pinned block.
  KERNEL_OK(kernels::delayed_copy(scratch_dst, scratch_src, 1 * mib, 200000, stream_));
  check(*drv_, drv_->memcpy_async(dst, block, size, stream_), "cudaMemcpyAsync H2D");
  alloc_->record_stream(block, stream_);
  alloc_->deallocate(block);

  void* next = alloc_->allocate(size);  // same size while the copy has not run yet
  EXPECT_NE(next, block) << "the freed block was handed out while a copy still reads it";
  std::memset(next, 0xee, size);  // what a program does with a fresh staging buffer
  const std::vector<std::uint8_t> delivered = read_back(dst, size);
  EXPECT_EQ(mismatches(delivered, 0, size, 1234), 0u) << "the copy read bytes written after the free";

  void* again = alloc_->allocate(size);  // the copy is done: the block is reusable
  EXPECT_EQ(again, block);
  alloc_->deallocate(again);
  alloc_->deallocate(next);
  const host_memory_stats stats = alloc_->stats();
  EXPECT_EQ(stats.allocation.current, 0);
  EXPECT_EQ(stats.segment.current, GetParam() == std::string("pinned_reserve_segment_size_mb:64") ? 1 : 2);
}

TEST_P(gpu_pinned, ACopyLoopThatFreesBuffersInFlightDeliversEveryByte) {
  constexpr std::size_t chunk = 1 * mib;
  constexpr int rounds = 64;
  void* dst = device_buffer(chunk * rounds);
  void* scratch_src = device_buffer(chunk);
  void* scratch_dst = device_buffer(chunk);
  KERNEL_OK(kernels::delayed_copy(scratch_dst, scratch_src, chunk, 50000, stream_));
  for (int r = 0; r < rounds; ++r) {
    void* staging = alloc_->allocate(chunk);
    fill(staging, chunk, static_cast<std::uint32_t>(r + 1));
    check(*drv_, drv_->memcpy_async(static_cast<char*>(dst) + chunk * r, staging, chunk, stream_), "H2D");
    alloc_->record_stream(staging, stream_);
    alloc_->deallocate(staging);
  }
  const std::vector<std::uint8_t> delivered = read_back(dst, chunk * rounds);
  for (int r = 0; r < rounds; ++r) {
    EXPECT_EQ(mismatches(delivered, chunk * r, chunk, static_cast<std::uint32_t>(r + 1)), 0u) << "round " << r;
  }
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().allocation.current, 0);
}

std::string config_name(const ::testing::TestParamInfo<const char*>& param) {
  static const char* const names[] = {"host_alloc", "host_register_8_threads", "background_thread",
                                      "reserve_segment"};
  return names[param.index];
}

INSTANTIATE_TEST_SUITE_P(configs, gpu_pinned,
                         ::testing::Values("", "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
                                           "pinned_use_background_threads:True", "pinned_reserve_segment_size_mb:64"),
                         config_name);

}  // namespace
}  // namespace streampool::testing
