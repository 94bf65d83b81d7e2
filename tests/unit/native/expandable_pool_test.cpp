// Expandable segments and graph capture (docs/pytorch-compatibility.md §2.13, §3): private pools get their own
// reservations; their pages are never unmapped while the pool is in use or while a capture is
// underway (a graph may replay them); a released pool's pages go at the next empty_cache and its
// arenas are recycled; running out of memory during a capture releases nothing.
#include <gtest/gtest.h>

#include "unit/native/expandable_test_support.hpp"

namespace streampool::test {
namespace {

stream_filter only(stream_t s) {
  return [s](stream_t candidate) { return candidate == s; };
}

struct capture_env : expandable_env {
  stream_t cap = new_stream();
  mempool_id pool = allocator::create_pool_id();

  explicit capture_env(std::size_t capacity = 80 * GiB) : expandable_env(capacity, "", /*eager=*/false) {}
  void begin() {
    alloc->begin_allocate_to_pool(pool, only(cap));
    sim->set_capture(cap, capture_status::active, 11);
  }
  void end() {
    sim->set_capture(cap, capture_status::none, 0);
    alloc->end_allocate_to_pool(pool);
  }
};

TEST(expandable_pool, PagesOfAPoolInUseAreNeverUnmapped) {
  capture_env env;
  void* outside = env.alloc->allocate(large_page, env.cap);  // default pool, before the capture
  env.alloc->deallocate(outside);
  env.begin();
  void* tmp = env.alloc->allocate(30 * MiB, env.cap);  // mapping is legal during capture
  void* out = env.alloc->allocate(4096, env.cap);
  env.alloc->deallocate(tmp);
  env.alloc->empty_cache();  // skipped: capture underway
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 0u);
  env.end();
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 3u) << "default large, pool large, pool small";
  for (const segment_info& s : env.segments()) {
    if (s.address != addr(outside)) {
      EXPECT_EQ(s.pool, env.pool);
    }
  }

  env.alloc->empty_cache();  // the pool is in use: only the default pool's free page goes
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 1u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page + small_page);

  env.alloc->release_pool(env.pool);
  env.alloc->empty_cache();  // freeable now: the free pages go, the live output's page stays
  EXPECT_EQ(env.sim->bytes_in_use(0), small_page);
  expect_consistent(env);
  env.alloc->deallocate(out);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 3u) << "every reservation freed";
  EXPECT_EQ(env.native().pool_use_count(env.pool, 0), 0) << "the pool object is gone";
}

TEST(expandable_pool, RepeatedCapturesReuseArenasAndDoNotGrow) {
  capture_env env;
  for (int i = 0; i < 50; ++i) {
    env.pool = allocator::create_pool_id();
    env.begin();
    env.alloc->deallocate(env.alloc->allocate(8 * MiB, env.cap));
    env.end();
    env.alloc->release_pool(env.pool);
    env.alloc->empty_cache();
  }
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_reserve), 50u);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 50u);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
}

TEST(expandable_pool, OutOfMemoryDuringCaptureKeepsCreatedPagesAndReleasesNothing) {
  capture_env env(100 * MiB);
  env.begin();
  void* a = env.alloc->allocate(large_page, env.cap);
  // Three pages wanted, the third cannot be created: releasing is illegal during a capture, so
  // the two created pages are mapped and kept as free memory of the pool.
  env.sim->fail_next(driver_call::vmm_create, 1, status::out_of_memory, /*skip=*/2);
  EXPECT_THROW((void)env.alloc->allocate(50 * MiB, env.cap), out_of_memory);
  EXPECT_EQ(env.calls(driver_call::vmm_release), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 0u);
  EXPECT_EQ(env.stats().num_alloc_retries, 0) << "release-all is skipped during capture";
  EXPECT_EQ(env.sim->bytes_in_use(0), 3 * large_page);
  const auto creates = env.calls(driver_call::vmm_create);
  void* b = env.alloc->allocate(40 * MiB, env.cap);  // served by the kept pages
  EXPECT_EQ(addr(b), addr(a) + large_page);
  EXPECT_EQ(env.calls(driver_call::vmm_create), creates);
  env.end();
  expect_consistent(env);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
  env.alloc->release_pool(env.pool);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

// Note [Leftover pages]: a growth that fails during a capture must not unmap or release (that
// could invalidate the capture). What got mapped with access is kept as free memory; the page
// whose map failed is kept aside, counted, and reused by the next growth.
TEST(expandable_pool, MapFailureDuringCaptureKeepsThePagesForTheNextGrowth) {
  capture_env env(256 * MiB);
  env.begin();
  env.sim->fail_next(driver_call::vmm_map, 1, status::out_of_memory, /*skip=*/1);
  EXPECT_THROW((void)env.alloc->allocate(30 * MiB, env.cap), out_of_memory);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 0u) << "nothing unmapped during the capture";
  EXPECT_EQ(env.calls(driver_call::vmm_release), 0u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, i64(2 * large_page)) << "both pages are still ours";
  ASSERT_EQ(env.segments().size(), 1u) << "the page mapped with access is free memory of the pool";
  EXPECT_EQ(env.segments()[0].total_size, large_page);
  const auto creates = env.calls(driver_call::vmm_create);
  void* p = env.alloc->allocate(30 * MiB, env.cap);  // maps the kept page: nothing new created
  EXPECT_EQ(env.calls(driver_call::vmm_create), creates);
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  env.end();
  expect_consistent(env);
  env.alloc->deallocate(p);
  env.alloc->release_pool(env.pool);
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

TEST(expandable_pool, AccessFailureDuringCaptureKeepsThePagesUntilAfterwards) {
  capture_env env(256 * MiB);
  env.begin();
  env.sim->fail_next(driver_call::vmm_set_access, 1, status::out_of_memory);
  EXPECT_THROW((void)env.alloc->allocate(30 * MiB, env.cap), out_of_memory);
  EXPECT_EQ(env.calls(driver_call::vmm_unmap), 0u);
  EXPECT_EQ(env.calls(driver_call::vmm_release), 0u);
  EXPECT_EQ(env.sim->bytes_in_use(0), 2 * large_page);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, i64(2 * large_page));
  EXPECT_TRUE(env.segments().empty()) << "mapped without access: not usable, not listed";
  EXPECT_THROW((void)env.alloc->allocate(30 * MiB, env.cap), out_of_memory) << "never mapped over";
  EXPECT_EQ(env.calls(driver_call::vmm_map), 2u);
  env.end();
  env.alloc->release_pool(env.pool);
  env.alloc->empty_cache();  // gives the kept pages back, then frees the pool's reservation
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  EXPECT_EQ(env.calls(driver_call::vmm_free), 1u);
  void* p = env.alloc->allocate(30 * MiB, env.cap);  // default pool: works
  env.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::test
