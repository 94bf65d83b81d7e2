// sim_pool_test.cpp — the sim driver's stream-ordered pools: default and created pools,
// packing and 32 MiB reservation, used/reserved figures and high-water marks, same-stream and
// cross-stream reuse under each reuse attribute, merging, release threshold and trimming,
// out_of_memory, destruction with live memory, access, and misuse.
#include <gtest/gtest.h>

#include <cstdint>

#include "driver_test_support.hpp"

namespace streampool::testing {
namespace {

class sim_pool : public sim_test {
 protected:
  sim_options make_options() override {
    sim_options options = lazy_two_devices();
    options.capacity = 256 * mib;
    return options;
  }
  void SetUp() override {
    sim_test::SetUp();
    ASSERT_TRUE(ok(sim().pool_create(0, &pool_)));
    s1_ = new_stream();
    s2_ = new_stream();
  }
  void* alloc(std::size_t bytes, stream_t stream) {
    void* ptr = nullptr;
    EXPECT_TRUE(ok(sim().malloc_async(pool_, bytes, stream, &ptr)));
    return ptr;
  }
  void release(void* ptr, stream_t stream) { ASSERT_TRUE(ok(sim().free_async(ptr, stream))); }
  void keep_everything() { ASSERT_TRUE(ok(sim().pool_set_attr(pool_, pool_attr::release_threshold, UINT64_MAX))); }
  std::uint64_t used() { return attr(pool_, pool_attr::used_mem_current); }
  std::uint64_t reserved() { return attr(pool_, pool_attr::reserved_mem_current); }

  mempool_t pool_ = nullptr;
  stream_t s1_ = nullptr;
  stream_t s2_ = nullptr;
};

TEST_F(sim_pool, DefaultPoolsArePerDeviceAndStable) {
  mempool_t zero = nullptr;
  mempool_t again = nullptr;
  mempool_t one = nullptr;
  ASSERT_TRUE(ok(sim().pool_get_default(0, &zero)));
  ASSERT_TRUE(ok(sim().pool_get_default(0, &again)));
  ASSERT_TRUE(ok(sim().pool_get_default(1, &one)));
  EXPECT_EQ(zero, again);
  EXPECT_NE(zero, one);
  EXPECT_NE(zero, pool_);
  EXPECT_TRUE(fails(status::invalid_device, sim().pool_get_default(2, &zero)));
  EXPECT_EQ(zero, nullptr);

  sim_options no_pools;
  no_pools.memory_pools_supported = false;
  sim_driver bare(no_pools);
  EXPECT_TRUE(fails_with(bare, status::not_supported, bare.pool_get_default(0, &one)));
  EXPECT_TRUE(fails_with(bare, status::not_supported, bare.pool_create(0, &one)));
}

TEST_F(sim_pool, SmallAllocationsPackIntoOne32MiBReservation) {
  void* a = alloc(1, s1_);
  void* b = alloc(1000, s1_);
  EXPECT_EQ(address(a) % (32 * mib), 0u);
  EXPECT_EQ(address(b), address(a) + 512) << "512 B blocks, packed";
  EXPECT_EQ(used(), 1001u) << "used counts the bytes requested";
  EXPECT_EQ(reserved(), 32 * mib);
  EXPECT_EQ(sim().bytes_in_use(0), 32 * mib) << "reserved memory is charged to the device";
  void* big = alloc(33 * mib, s1_);
  EXPECT_EQ(address(big), address(b) + 1024) << "a miss extends the pool's range: the block starts in the unused tail";
  EXPECT_EQ(reserved(), 64 * mib) << "and maps the 32 MiB granules it touches (as measured on an H200)";
  EXPECT_EQ(attr(pool_, pool_attr::reserved_mem_high), 64 * mib);
  EXPECT_EQ(attr(pool_, pool_attr::used_mem_high), 1001u + 33 * mib);
  release(big, s1_);
  EXPECT_EQ(used(), 1001u);
  EXPECT_EQ(attr(pool_, pool_attr::used_mem_high), 1001u + 33 * mib) << "the high-water mark stays";
}

// Note [Sim pool model]: the placement rules measured on an H200.
TEST_F(sim_pool, PlacementFollowsTheMeasuredRules) {
  keep_everything();
  void* wide = alloc(20 * mib, s1_);
  void* sep1 = alloc(mib, s1_);
  void* narrow = alloc(2 * mib, s1_);
  void* sep2 = alloc(mib, s1_);
  release(wide, s1_);
  release(narrow, s1_);
  EXPECT_EQ(alloc(10 * mib, s1_), wide) << "best fit: the 20 MiB hole is the only one that fits";
  EXPECT_EQ(address(alloc(256, s1_)), address(wide) + 10 * mib)
      << "a small request takes the rest of the block just split, not the better-fitting 2 MiB hole";
  EXPECT_EQ(alloc(2 * mib, s1_), narrow) << "a request of 1 MiB or more takes the best fit";
  EXPECT_EQ(reserved(), 32 * mib);
  void* end = alloc(30 * mib, s1_);
  EXPECT_EQ(address(end), address(sep2) + mib) << "the end of the range: no free block fits";
  EXPECT_EQ(reserved(), 64 * mib) << "the block straddles the first granule and a new one";
  release(end, s1_);
  EXPECT_EQ(alloc(16 * mib, s1_), end) << "a freed block at the end stays a free block (best fit)";
  EXPECT_EQ(address(alloc(512, s1_)), address(end) + 16 * mib);
  EXPECT_EQ(reserved(), 64 * mib);
  void* beyond = alloc(40 * mib, s1_);
  EXPECT_EQ(address(beyond), address(end) + 16 * mib + 512) << "growth starts in the free block at the end";
  EXPECT_EQ(reserved(), 96 * mib);
  release(sep1, s1_);
}

TEST_F(sim_pool, AFreeIsReusableOnItsOwnStreamAtOnce) {
  keep_everything();
  void* first = alloc(mib, s1_);
  release(first, s1_);  // not complete: the sim is in controlled mode
  EXPECT_EQ(alloc(mib, s1_), first);
  EXPECT_EQ(reserved(), 32 * mib);
}

TEST_F(sim_pool, AnotherStreamReusesAFreeOnlyOnceItCompleted) {
  keep_everything();
  void* first = alloc(mib, s1_);
  void* neighbour = alloc(mib, s1_);  // keeps the freed block from merging with the tail
  release(first, s1_);
  void* elsewhere = alloc(mib, s2_);
  EXPECT_NE(elsewhere, first) << "s1's free is still pending";
  sim().complete(s1_);
  void* now = alloc(mib, s2_);
  EXPECT_EQ(now, first) << "completed frees are reused opportunistically";
  release(neighbour, s1_);
}

TEST_F(sim_pool, WithoutOpportunisticReuseASyncIsNeeded) {
  keep_everything();
  ASSERT_TRUE(ok(sim().pool_set_attr(pool_, pool_attr::reuse_allow_opportunistic, 0)));
  void* first = alloc(mib, s1_);
  void* neighbour = alloc(mib, s1_);
  release(first, s1_);
  sim().complete(s1_);
  EXPECT_NE(alloc(mib, s2_), first) << "completed but not observed by the host";
  ASSERT_TRUE(ok(sim().stream_synchronize(0, s1_)));
  EXPECT_EQ(alloc(mib, s2_), first) << "settled by the synchronize";
  release(neighbour, s1_);
}

TEST_F(sim_pool, AnEventDependencyAllowsReuseBeforeCompletion) {
  keep_everything();
  const event_t freed = new_event();
  void* first = alloc(mib, s1_);
  void* neighbour = alloc(mib, s1_);
  release(first, s1_);
  ASSERT_TRUE(ok(sim().event_record(freed, s1_)));
  ASSERT_TRUE(ok(sim().stream_wait_event(s2_, freed)));
  EXPECT_EQ(alloc(mib, s2_), first) << "s2 is ordered after the free";
  release(neighbour, s1_);

  ASSERT_TRUE(ok(sim().pool_set_attr(pool_, pool_attr::reuse_follow_event_dependencies, 0)));
  const stream_t s3 = new_stream();
  void* second = alloc(mib, s1_);
  void* guard = alloc(mib, s1_);
  release(second, s1_);
  ASSERT_TRUE(ok(sim().event_record(freed, s1_)));
  ASSERT_TRUE(ok(sim().stream_wait_event(s3, freed)));
  EXPECT_NE(alloc(mib, s3), second) << "dependencies are ignored when the attribute is off";
  release(guard, s1_);
}

TEST_F(sim_pool, AdjacentFreesMergeWhenTheirStatesAgree) {
  keep_everything();
  void* a = alloc(mib, s1_);
  void* b = alloc(mib, s2_);
  void* tail = alloc(mib, s1_);
  release(a, s1_);
  release(b, s2_);
  EXPECT_NE(alloc(2 * mib, s1_), a) << "pending on different streams: not merged";
  ASSERT_TRUE(ok(sim().device_synchronize(0)));
  const stream_t s3 = new_stream();
  EXPECT_EQ(alloc(2 * mib, s3), a) << "both settled by the sync: one 2 MiB block";
  release(tail, s1_);
}

TEST_F(sim_pool, SynchronisationTrimsToTheReleaseThreshold) {
  void* ptr = alloc(mib, s1_);
  release(ptr, s1_);
  EXPECT_EQ(reserved(), 32 * mib) << "nothing is released before a sync";
  ASSERT_TRUE(ok(sim().stream_synchronize(0, s1_)));
  EXPECT_EQ(reserved(), 0u) << "release_threshold 0: trim at every sync";
  EXPECT_EQ(sim().bytes_in_use(0), 0u);

  ASSERT_TRUE(ok(sim().pool_set_attr(pool_, pool_attr::release_threshold, 40 * mib)));
  void* x = alloc(30 * mib, s1_);
  void* y = alloc(30 * mib, s1_);
  void* z = alloc(30 * mib, s1_);
  release(x, s1_);
  release(y, s1_);
  release(z, s1_);
  const event_t done = new_event();
  ASSERT_TRUE(ok(sim().event_record(done, s1_)));
  ASSERT_TRUE(ok(sim().event_synchronize(done)));
  EXPECT_EQ(reserved(), 32 * mib) << "idle chunks released until reserved <= 40 MiB";
}

TEST_F(sim_pool, TrimToReleasesIdleCompletedChunksOnly) {
  keep_everything();
  void* live = alloc(mib, s1_);
  void* freed = alloc(40 * mib, s1_);  // [1 MiB, 41 MiB): granules 0 and 1
  release(freed, s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 64 * mib) << "the free has not completed yet";
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 32 * mib) << "the granule holding a live block stays";
  EXPECT_EQ(alloc(40 * mib, s1_), freed) << "the free block keeps its place and is mapped again";
  EXPECT_EQ(reserved(), 64 * mib);
  release(freed, s1_);
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  release(live, s1_);
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 32 * mib)));
  EXPECT_EQ(reserved(), 32 * mib) << "already within keep_bytes";
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 0u);
}

TEST_F(sim_pool, TrimmingGivesAnUnmappedEndBackToTheUnusedTail) {
  keep_everything();
  void* live = alloc(10 * mib, s1_);
  void* end = alloc(40 * mib, s1_);  // [10, 50) MiB: granules 0 and 1
  release(end, s1_);
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 32 * mib) << "granule 1 held only free bytes";
  EXPECT_EQ(alloc(20 * mib, s1_), end) << "the part of the free end block in granule 0 stays a free block";
  EXPECT_EQ(reserved(), 32 * mib);
  void* next = alloc(4 * mib, s1_);  // [30, 34) MiB
  EXPECT_EQ(address(next), address(end) + 20 * mib) << "the range went on from there";
  EXPECT_EQ(reserved(), 64 * mib) << "granule 1 mapped again";
  release(end, s1_);
  release(next, s1_);
  release(live, s1_);
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 0u);
  EXPECT_EQ(alloc(mib, s1_), live) << "with everything unmapped the range starts over";
  EXPECT_EQ(reserved(), 32 * mib);
}

TEST_F(sim_pool, AttributesFollowTheCudaRules) {
  EXPECT_EQ(attr(pool_, pool_attr::release_threshold), 0u);
  for (const pool_attr flag : {pool_attr::reuse_follow_event_dependencies, pool_attr::reuse_allow_opportunistic,
                               pool_attr::reuse_allow_internal_dependencies}) {
    EXPECT_EQ(attr(pool_, flag), 1u) << "reuse policies default to on";
    ASSERT_TRUE(ok(sim().pool_set_attr(pool_, flag, 0)));
    EXPECT_EQ(attr(pool_, flag), 0u);
    ASSERT_TRUE(ok(sim().pool_set_attr(pool_, flag, 7)));
    EXPECT_EQ(attr(pool_, flag), 1u) << "any non-zero value is on";
  }
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_set_attr(pool_, pool_attr::used_mem_current, 0)));
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_set_attr(pool_, pool_attr::reserved_mem_current, 0)));
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_set_attr(pool_, pool_attr::used_mem_high, 1)));
  void* ptr = alloc(5 * mib, s1_);
  release(ptr, s1_);
  ASSERT_TRUE(ok(sim().stream_synchronize(0, s1_)));
  EXPECT_EQ(attr(pool_, pool_attr::used_mem_high), 5 * mib);
  EXPECT_EQ(attr(pool_, pool_attr::reserved_mem_high), 32 * mib);
  ASSERT_TRUE(ok(sim().pool_set_attr(pool_, pool_attr::used_mem_high, 0)));
  ASSERT_TRUE(ok(sim().pool_set_attr(pool_, pool_attr::reserved_mem_high, 0)));
  EXPECT_EQ(attr(pool_, pool_attr::used_mem_high), 0u) << "reset to current";
  EXPECT_EQ(attr(pool_, pool_attr::reserved_mem_high), 0u);
  std::uint64_t value = 0;
  const auto bogus = reinterpret_cast<mempool_t>(0x77);
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_get_attr(bogus, pool_attr::used_mem_current, &value)));
}

TEST_F(sim_pool, OutOfMemoryWhenAReservationDoesNotFit) {
  keep_everything();
  void* first = alloc(100 * mib, s1_);  // reserves 128 MiB of 256
  void* last = alloc(mib, s1_);          // keeps `first` from being extended once freed
  void* ptr = reinterpret_cast<void*>(0x1);
  const drv_result failed = sim().malloc_async(pool_, 200 * mib, s1_, &ptr);
  EXPECT_EQ(failed.code, status::out_of_memory);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(sim().describe(failed), "sim: out_of_memory (device 0: 0.25 GiB capacity, 0.12 GiB in use)");
  EXPECT_TRUE(fails(status::out_of_memory, sim().malloc_async(pool_, SIZE_MAX, s1_, &ptr)));
  release(first, s1_);
  sim().complete(s1_);
  EXPECT_TRUE(fails(status::out_of_memory, sim().malloc_async(pool_, 200 * mib, s1_, &ptr)))
      << "the sim does not trim on its own";
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 32 * mib) << "only the granule holding `last` stays";
  EXPECT_TRUE(ok(sim().malloc_async(pool_, 200 * mib, s1_, &ptr))) << "after the caller trims";
  EXPECT_EQ(address(ptr), address(last) + mib);
  release(ptr, s1_);
  release(last, s1_);
}

TEST_F(sim_pool, MisuseIsRejected) {
  void* ptr = reinterpret_cast<void*>(0x1);
  ASSERT_TRUE(ok(sim().malloc_async(pool_, 0, s1_, &ptr)));
  EXPECT_EQ(ptr, nullptr);
  EXPECT_TRUE(ok(sim().free_async(nullptr, s1_)));
  EXPECT_TRUE(fails(status::invalid_value, sim().malloc_async(reinterpret_cast<mempool_t>(0x77), 1, s1_, &ptr)));
  void* live = alloc(4096, s1_);
  EXPECT_TRUE(fails(status::invalid_value, sim().free_async(static_cast<char*>(live) + 512, s1_))) << "interior";
  EXPECT_TRUE(fails(status::invalid_value, sim().free(0, live))) << "not a cudaMalloc block";
  void* plain = nullptr;
  ASSERT_TRUE(ok(sim().malloc(0, 4096, &plain)));
  EXPECT_TRUE(fails(status::invalid_value, sim().free_async(plain, s1_))) << "not a pool block";
  release(live, s1_);
  EXPECT_TRUE(fails(status::invalid_value, sim().free_async(live, s1_))) << "double free";
  EXPECT_EQ(used(), 0u);
}

TEST_F(sim_pool, DestroyingAPoolDefersTheReleaseOfLiveMemory) {
  mempool_t default_pool = nullptr;
  ASSERT_TRUE(ok(sim().pool_get_default(0, &default_pool)));
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_destroy(default_pool)));
  void* live = alloc(mib, s1_);
  void* other_chunk = alloc(40 * mib, s1_);
  release(other_chunk, s1_);
  ASSERT_TRUE(ok(sim().pool_destroy(pool_)));
  EXPECT_EQ(sim().bytes_in_use(0), 32 * mib) << "the idle chunk went at once";
  std::uint64_t value = 0;
  void* ptr = nullptr;
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_get_attr(pool_, pool_attr::used_mem_current, &value)));
  EXPECT_TRUE(fails(status::invalid_value, sim().malloc_async(pool_, 1, s1_, &ptr)));
  EXPECT_TRUE(fails(status::invalid_value, sim().pool_destroy(pool_)));
  release(live, s1_);
  EXPECT_EQ(sim().bytes_in_use(0), 0u) << "the last free released the rest";
}

TEST_F(sim_pool, AccessIsRecordedForValidPeers) {
  EXPECT_TRUE(ok(sim().pool_set_access(pool_, 1, true)));
  EXPECT_TRUE(ok(sim().pool_set_access(pool_, 1, false)));
  EXPECT_TRUE(ok(sim().pool_set_access(pool_, 0, true)));
  EXPECT_TRUE(fails(status::invalid_device, sim().pool_set_access(pool_, 0, false))) << "the owner keeps access";
  EXPECT_TRUE(fails(status::invalid_device, sim().pool_set_access(pool_, 2, true)));
}

TEST_F(sim_pool, PoolsChargeTheirOwnDevice) {
  mempool_t on_one = nullptr;
  ASSERT_TRUE(ok(sim().pool_create(1, &on_one)));
  void* ptr = nullptr;
  ASSERT_TRUE(ok(sim().malloc_async(on_one, mib, s1_, &ptr))) << "a stream of another device may allocate";
  EXPECT_EQ(sim().bytes_in_use(1), 32 * mib);
  EXPECT_EQ(sim().bytes_in_use(0), 0u);
  void* zero_ptr = alloc(mib, s1_);
  EXPECT_NE(address(ptr) >> 52, address(zero_ptr) >> 52) << "separate address spaces";
}

}  // namespace
}  // namespace streampool::testing
