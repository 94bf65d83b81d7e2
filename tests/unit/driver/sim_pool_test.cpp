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
    sim_options options;
    options.device_count = 2;
    options.capacity = 256 * mib;
    options.eager_completion = false;
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

TEST_F(sim_pool, default_pools_are_per_device_and_stable) {
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

TEST_F(sim_pool, small_allocations_pack_into_one_32_mib_reservation) {
  void* a = alloc(1, s1_);
  void* b = alloc(1000, s1_);
  EXPECT_EQ(address(a) % (32 * mib), 0u);
  EXPECT_EQ(address(b), address(a) + 512) << "512 B blocks, packed";
  EXPECT_EQ(used(), 1001u) << "used counts the bytes requested";
  EXPECT_EQ(reserved(), 32 * mib);
  EXPECT_EQ(sim().bytes_in_use(0), 32 * mib) << "reserved memory is charged to the device";
  void* big = alloc(33 * mib, s1_);
  EXPECT_EQ(reserved(), 32 * mib + 64 * mib) << "a miss reserves the request rounded up to 32 MiB";
  EXPECT_EQ(attr(pool_, pool_attr::reserved_mem_high), 96 * mib);
  EXPECT_EQ(attr(pool_, pool_attr::used_mem_high), 1001u + 33 * mib);
  release(big, s1_);
  EXPECT_EQ(used(), 1001u);
  EXPECT_EQ(attr(pool_, pool_attr::used_mem_high), 1001u + 33 * mib) << "the high-water mark stays";
}

TEST_F(sim_pool, a_free_is_reusable_on_its_own_stream_at_once) {
  keep_everything();
  void* first = alloc(mib, s1_);
  release(first, s1_);  // not complete: the sim is in controlled mode
  EXPECT_EQ(alloc(mib, s1_), first);
  EXPECT_EQ(reserved(), 32 * mib);
}

TEST_F(sim_pool, another_stream_reuses_a_free_only_once_it_completed) {
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

TEST_F(sim_pool, without_opportunistic_reuse_a_sync_is_needed) {
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

TEST_F(sim_pool, an_event_dependency_allows_reuse_before_completion) {
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

TEST_F(sim_pool, adjacent_frees_merge_when_their_states_agree) {
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

TEST_F(sim_pool, synchronisation_trims_to_the_release_threshold) {
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

TEST_F(sim_pool, trim_to_releases_idle_completed_chunks_only) {
  keep_everything();
  void* live = alloc(mib, s1_);
  void* freed = alloc(40 * mib, s1_);
  release(freed, s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 32 * mib + 64 * mib) << "the free has not completed yet";
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 32 * mib) << "the chunk holding a live block stays";
  release(live, s1_);
  sim().complete(s1_);
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 32 * mib)));
  EXPECT_EQ(reserved(), 32 * mib) << "already within keep_bytes";
  ASSERT_TRUE(ok(sim().pool_trim_to(pool_, 0)));
  EXPECT_EQ(reserved(), 0u);
}

TEST_F(sim_pool, attributes_follow_the_cuda_rules) {
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

TEST_F(sim_pool, out_of_memory_when_a_reservation_does_not_fit) {
  keep_everything();
  void* first = alloc(100 * mib, s1_);  // reserves 128 MiB of 256
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
  EXPECT_TRUE(ok(sim().malloc_async(pool_, 200 * mib, s1_, &ptr))) << "after the caller trims";
}

TEST_F(sim_pool, misuse_is_rejected) {
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

TEST_F(sim_pool, destroying_a_pool_defers_the_release_of_live_memory) {
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

TEST_F(sim_pool, access_is_recorded_for_valid_peers) {
  EXPECT_TRUE(ok(sim().pool_set_access(pool_, 1, true)));
  EXPECT_TRUE(ok(sim().pool_set_access(pool_, 1, false)));
  EXPECT_TRUE(ok(sim().pool_set_access(pool_, 0, true)));
  EXPECT_TRUE(fails(status::invalid_device, sim().pool_set_access(pool_, 0, false))) << "the owner keeps access";
  EXPECT_TRUE(fails(status::invalid_device, sim().pool_set_access(pool_, 2, true)));
}

TEST_F(sim_pool, pools_charge_their_own_device) {
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
