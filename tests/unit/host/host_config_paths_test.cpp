// host_config_paths_test.cpp — the pinned_* keys at work: cudaHostRegister of malloc'd memory
// with pages touched by pinned_num_register_threads threads, the reserve segment of
// pinned_reserve_segment_size_mb, and the background thread of pinned_use_background_threads.
#include <chrono>
#include <cstring>
#include <thread>

#include "host_test_support.hpp"

namespace streampool::test {
namespace {

TEST(host_register_path, MallocTouchAndRegisterInsteadOfHostAlloc) {
  for (const char* threads : {"1", "4", "128"}) {
    host_env env(std::string("pinned_use_cuda_host_register:True,pinned_num_register_threads:") + threads);
    void* a = env.alloc->allocate(3 * mib);  // 4 MiB block: every thread touches ~1 page or more
    std::memset(a, 7, 3 * mib);
    EXPECT_EQ(env.sim->calls(driver_call::host_alloc), 0u);
    EXPECT_EQ(env.sim->calls(driver_call::host_register), 1u);
    EXPECT_EQ(env.sim->live_host_registrations(), 1u);
    EXPECT_EQ(env.sim->host_bytes_pinned(), 4 * mib);
    const host_snapshot snap = env.alloc->snapshot();
    ASSERT_EQ(snap.segments.size(), 1u);
    EXPECT_TRUE(snap.segments[0].registered);
    void* small = env.alloc->allocate(10);  // fewer pages than threads: touched by the caller
    env.alloc->deallocate(a);
    env.alloc->deallocate(small);
    env.alloc->empty_cache();
    EXPECT_EQ(env.sim->calls(driver_call::host_unregister), 2u);
    EXPECT_EQ(env.sim->live_host_registrations(), 0u);
  }
}

TEST(host_register_path, AFailedRegisterFreesTheMallocAndReportsIt) {
  host_env env("pinned_use_cuda_host_register:True,pinned_num_register_threads:2");
  env.sim->fail_next(driver_call::host_register, 1, status::other);
  try {
    (void)env.alloc->allocate(64 * kib);
    FAIL() << "expected cuda_error";
  } catch (const cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaHostRegister of 64.00 KiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(env.alloc->stats().segment.current, 0);
  void* ok = env.alloc->allocate(64 * kib);
  env.alloc->deallocate(ok);
}

TEST(host_register_path, MoreThanPhysicalMemoryIsRefusedBeforeMalloc) {
  host_env env("pinned_use_cuda_host_register:True");
  try {
    (void)env.alloc->allocate(std::size_t{1} << 50);  // 1 PiB
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("physical memory"), std::string::npos) << e.what();
    EXPECT_EQ(e.requested_bytes(), std::size_t{1} << 50);
  }
  EXPECT_EQ(env.sim->calls(driver_call::host_register), 0u);
}

TEST(host_reserve_segment, SmallBlocksAreCarvedFromOneSegment) {
  host_env env("pinned_reserve_segment_size_mb:1");
  void* a = env.alloc->allocate(100);         // 128 B
  void* b = env.alloc->allocate(5000);        // 8 KiB, 4 KiB aligned
  void* c = env.alloc->allocate(512 * kib);   // fits what is left
  EXPECT_EQ(env.sim->calls(driver_call::host_alloc), 1u) << "one driver call: the reserve";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c) % 4096, 0u);
  void* d = env.alloc->allocate(1 * mib);     // does not fit: its own range
  EXPECT_EQ(env.sim->calls(driver_call::host_alloc), 2u);
  host_snapshot snap = env.alloc->snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  int reserves = 0;
  for (const host_segment_info& s : snap.segments) {
    if (s.reserve) {
      ++reserves;
      EXPECT_EQ(s.size, 1 * mib);
      EXPECT_GE(s.reserve_used, 128 + 8192 + 512 * kib);
    }
  }
  EXPECT_EQ(reserves, 1);
  EXPECT_EQ(env.alloc->stats().segment.current, 2);
  for (void* p : {a, b, c, d}) env.alloc->deallocate(p);
  env.alloc->empty_cache();
  snap = env.alloc->snapshot();
  EXPECT_EQ(snap.segments.size(), 1u) << "the reserve stays";
  EXPECT_EQ(snap.blocks.size(), 3u) << "carved blocks stay cached";
  EXPECT_EQ(env.alloc->allocate(100), a);
  env.alloc->deallocate(a);
}

TEST(host_reserve_segment, AFailedReserveIsRetriedByTheNextMiss) {
  host_env env("pinned_reserve_segment_size_mb:2");
  env.sim->fail_next(driver_call::host_alloc, 2);  // the reserve and its OOM retry
  EXPECT_THROW((void)env.alloc->allocate(64), out_of_memory);
  void* a = env.alloc->allocate(64);
  EXPECT_EQ(env.alloc->snapshot().segments.at(0).size, 2 * mib);
  env.alloc->deallocate(a);
}

TEST(host_background_thread, FreedBlocksBecomeReusableWithoutTheAllocationPath) {
  host_env env("pinned_use_background_threads:True", lazy_streams());
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(4096);
  void* a = env.alloc->allocate(4096);
  env.copy_from(a, 4096, stream, device);
  env.alloc->deallocate(a);
  env.sim->complete(stream);
  // The thread (not allocate) moves the block back to the free list.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (env.alloc->snapshot().blocks[0].state != host_block_state::cached &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(env.alloc->snapshot().blocks[0].state, host_block_state::cached);
  EXPECT_EQ(env.alloc->allocate(4096), a);
  env.alloc->deallocate(a);
  (void)env.sim->free(0, device);
}

TEST(host_background_thread, AMissStillLooksAtEventsItself) {
  host_env env("pinned_use_background_threads:True", lazy_streams());
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(64);
  void* a = env.alloc->allocate(64);
  env.copy_from(a, 64, stream, device);
  env.alloc->deallocate(a);
  env.sim->complete(stream);
  EXPECT_EQ(env.alloc->allocate(64), a);  // whether or not the thread has looked yet
  env.alloc->deallocate(a);
  (void)env.sim->free(0, device);
}

TEST(host_background_thread, ManyThreadsAllocateWhileTheThreadPolls) {
  host_env env("pinned_use_background_threads:True");
  const stream_t stream = env.make_stream();
  void* device = env.device_buffer(1024);
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        void* p = env.alloc->allocate(64u << (i % 5));
        static_cast<char*>(p)[0] = static_cast<char>(t);
        if (i % 3 == 0) env.copy_from(p, 64, stream, device);
        env.alloc->deallocate(p);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  env.alloc->empty_cache();  // looks at the events the thread has not seen yet
  EXPECT_EQ(env.alloc->stats().allocation.current, 0);
  (void)env.sim->free(0, device);
}

}  // namespace
}  // namespace streampool::test
