// allocate_at_test.cpp — allocate_at (Note [Allocations at an address] in native_allocator.cpp):
// a freed allocation of a private pool made again at its address, carved out of the free block that
// holds it, with statistics that still agree with the snapshot; and every refusal (a range that is
// not free, not of the pool, the default pool, a size that is no block size), each leaving the
// allocator as it was (the cudaMallocAsync backend's refusal: async_private_pool_test.cpp).
#include <gtest/gtest.h>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

/// Inactive split blocks as the snapshot shows them: free blocks of segments with more than one
/// block (docs/pytorch-compatibility.md §2.14), of non-expandable segments.
std::pair<std::int64_t, std::int64_t> inactive_splits(const memory_snapshot& snap) {
  std::int64_t count = 0;
  std::int64_t bytes = 0;
  for (const segment_info& s : snap.segments) {
    if (s.blocks.size() < 2 || s.is_expandable) continue;
    for (const block_info& b : s.blocks) {
      if (b.state != block_state::inactive) continue;
      ++count;
      bytes += static_cast<std::int64_t>(b.size);
    }
  }
  return {count, bytes};
}

void expect_stats_agree(native_env& env) {
  const memory_stats st = env.stats();
  const auto [count, bytes] = inactive_splits(env.alloc->snapshot());
  EXPECT_EQ(st.inactive_split[0].current, count);
  EXPECT_EQ(st.inactive_split_bytes[0].current, bytes);
}

class allocate_at_test : public ::testing::Test {
 protected:
  void SetUp() override {
    stream_ = env_.new_stream();
    pool_ = allocator::create_pool_id();
    const stream_t stream = stream_;
    env_.alloc->begin_allocate_to_pool(pool_, [stream](stream_t s) { return s == stream; });
    for (const std::size_t size : {MiB, 3 * MiB, 2 * MiB}) blocks_.push_back(env_.alloc->allocate(size, stream_));
    env_.alloc->end_allocate_to_pool(pool_);
  }
  void TearDown() override {
    for (void* p : blocks_) {
      if (p != nullptr) env_.alloc->deallocate(p);
    }
    env_.alloc->release_pool(pool_);
    env_.alloc->empty_cache();
    EXPECT_EQ(env_.sim->bytes_in_use(0), 0u);
  }

  native_env env_;
  stream_t stream_ = nullptr;
  mempool_id pool_{};
  std::vector<void*> blocks_;
};

TEST_F(allocate_at_test, AFreedAllocationIsMadeAgainAtItsAddress) {
  void* middle = blocks_[1];
  env_.alloc->deallocate(middle);
  blocks_[1] = nullptr;
  expect_stats_agree(env_);
  const std::int64_t before = env_.stats().allocation[0].current;
  blocks_[1] = env_.alloc->allocate_at(middle, 3 * MiB, pool_);
  EXPECT_EQ(blocks_[1], middle);
  EXPECT_EQ(env_.stats().allocation[0].current, before + 1);
  expect_stats_agree(env_);
  // All three freed, then the last two (one large segment) made again, the later one first: both
  // carved out of the one free block they merged into.
  void* last = blocks_[2];
  for (void*& p : blocks_) {
    env_.alloc->deallocate(p);
    p = nullptr;
  }
  expect_stats_agree(env_);
  blocks_.push_back(env_.alloc->allocate(MiB, stream_));  // not routed: the general pool
  blocks_[2] = env_.alloc->allocate_at(last, 2 * MiB, pool_);
  EXPECT_EQ(blocks_[2], last);
  expect_stats_agree(env_);
  blocks_[1] = env_.alloc->allocate_at(middle, 3 * MiB, pool_);
  EXPECT_EQ(blocks_[1], middle);
  expect_stats_agree(env_);
  EXPECT_EQ(env_.stats().allocated_bytes[0].current, static_cast<std::int64_t>(6 * MiB));
}

TEST_F(allocate_at_test, RangesThatAreNotFreeMemoryOfThePoolAreRefusedAndNothingChanges) {
  const memory_stats before = env_.stats();
  void* live = blocks_[0];
  EXPECT_THROW((void)env_.alloc->allocate_at(live, MiB, pool_), error) << "still allocated";
  env_.alloc->deallocate(blocks_[1]);
  void* freed = blocks_[1];
  blocks_[1] = nullptr;
  EXPECT_THROW((void)env_.alloc->allocate_at(freed, 4 * MiB, pool_), error) << "runs into the next allocation";
  EXPECT_THROW((void)env_.alloc->allocate_at(freed, 3 * MiB, allocator::create_pool_id()), error) << "another pool";
  EXPECT_THROW((void)env_.alloc->allocate_at(freed, 3 * MiB, mempool_id{}), error) << "the default pool";
  EXPECT_THROW((void)env_.alloc->allocate_at(freed, 1000, pool_), error) << "not a block size";
  void* general = env_.alloc->allocate(MiB, stream_);
  EXPECT_THROW((void)env_.alloc->allocate_at(general, MiB, pool_), error) << "memory of the general pool";
  env_.alloc->deallocate(general);
  EXPECT_EQ(env_.stats().allocation[0].current, before.allocation[0].current - 1);
  expect_stats_agree(env_);
  blocks_[1] = env_.alloc->allocate_at(freed, 3 * MiB, pool_);  // and it still works
  EXPECT_EQ(blocks_[1], freed);
}

}  // namespace
}  // namespace streampool::test
