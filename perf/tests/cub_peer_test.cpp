// cub_peer_test.cpp — the `cub` peer on a real GPU (skipped, with the reason, where there is none):
// CUB's bins and cache seen through the peer's statistics — a cache hit makes no device malloc,
// a request above the largest bin is a cudaMalloc/cudaFree each, reserved and its peak follow
// CUB's cudaMalloc'd bytes. On the sim driver the peer is refused (peer_test.cpp).
#include <gtest/gtest.h>

#include "backend_registry.hpp"
#include "peer_cub.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {
namespace {

TEST(cub_peer, BinsCacheAndCountsOnARealGpu) {
  ASSERT_TRUE(cub_peer_built()) << "CUB's header was not found at build time";
  std::shared_ptr<driver> cuda = make_cuda_driver();
  int count = 0;
  const drv_result probe = cuda->device_count(&count);
  if (!probe.ok() || count == 0) {
    GTEST_SKIP() << "no CUDA device: " << (probe.ok() ? std::string("0 devices") : cuda->describe(probe));
  }
  std::unique_ptr<allocator> alloc = make_backend({"cub", ""}, cuda);
  stream_t stream = nullptr;
  ASSERT_TRUE(cuda->stream_create(0, &stream).ok());

  void* a = alloc->allocate(1000, stream, 0);  // bin 4 KiB: one cudaMalloc of 4096 bytes
  memory_stats s = alloc->stats(0);
  EXPECT_EQ(s.allocated_bytes[0].current, 1000);
  EXPECT_EQ(s.reserved_bytes[0].current, 4096);
  EXPECT_EQ(s.num_device_alloc, 1);
  alloc->deallocate(a);
  void* b = alloc->allocate(900, stream, 0);  // same bin, same stream: a cache hit
  EXPECT_EQ(alloc->stats(0).num_device_alloc, 1);
  EXPECT_EQ(alloc->stats(0).reserved_bytes[0].current, 4096);

  void* big = alloc->allocate(std::size_t{64} << 20, stream, 0);  // above the 2 MiB bin: never cached
  EXPECT_EQ(alloc->stats(0).num_device_alloc, 2);
  alloc->deallocate(big);  // a cudaFree
  s = alloc->stats(0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.reserved_bytes[0].current, 4096);
  EXPECT_EQ(s.reserved_bytes[0].peak, 4096 + (std::int64_t{64} << 20));

  EXPECT_THROW(alloc->deallocate(big), error);  // double free: refused before reaching CUB
  alloc->deallocate(b);
  EXPECT_EQ(leak_check(*alloc, 0), "ok");
  alloc->empty_cache();  // FreeAllCached
  EXPECT_EQ(alloc->stats(0).reserved_bytes[0].current, 0);
  alloc.reset();
  EXPECT_TRUE(cuda->stream_destroy(0, stream).ok());
}

}  // namespace
}  // namespace streampool::bench
