// lifecycle_test.cpp — destroying an allocator gives all of its device memory back, on every
// backend: after everything was freed (without an empty_cache first), and with allocations still
// live (the allocator is going away, as native_allocator's destructor documents). For the
// cudaMallocAsync backend on the device's default pool this also means the pool's release
// threshold, which the backend raised to keep its cache, is put back as it was.
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "stress/stress_test_support.hpp"

namespace streampool::stress {
namespace {

std::vector<stress_case> lifecycle_cases() {
  std::vector<stress_case> cases = stress_cases();
  cases.push_back({"async_dedicated", "backend:cudaMallocAsync,async_pool:dedicated", true});
  return cases;
}

class lifecycle : public ::testing::TestWithParam<stress_case> {
 protected:
  void SetUp() override {
    sim_options options;
    options.device_count = 2;
    options.eager_completion = false;
    sim_ = std::make_shared<sim_driver>(options);
    alloc_ = make_allocator(parse_config(GetParam().config), sim_);
    ASSERT_TRUE(sim_->stream_create(0, &a_).ok());
    ASSERT_TRUE(sim_->stream_create(0, &b_).ok());
    ASSERT_TRUE(sim_->stream_create(1, &c_).ok());
  }

  /// A mix of sizes on two devices, some record_stream'ed; returns the pointers.
  std::vector<void*> allocate_some() {
    std::vector<void*> out;
    for (const std::size_t size : {std::size_t{700}, 64 * kib, 3 * mib, 30 * mib}) {
      out.push_back(alloc_->allocate(size, a_, 0));
      out.push_back(alloc_->allocate(size, c_, 1));
    }
    alloc_->record_stream(out[0], b_);
    alloc_->record_stream(out[4], b_);
    return out;
  }

  void expect_nothing_held(const char* when) {
    for (int d = 0; d < 2; ++d) EXPECT_EQ(sim_->bytes_in_use(d), 0u) << when << ", device " << d;
  }

  std::shared_ptr<sim_driver> sim_;
  std::unique_ptr<allocator> alloc_;
  stream_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

TEST_P(lifecycle, DestroyingAfterFreeingEverythingReturnsAllMemory) {
  for (void* p : allocate_some()) alloc_->deallocate(p);
  EXPECT_GT(sim_->bytes_in_use(0), 0u);  // cached
  alloc_.reset();
  sim_->complete_all();
  expect_nothing_held("after destroying the allocator");
}

TEST_P(lifecycle, DestroyingWithLiveAllocationsReturnsAllMemory) {
  const std::vector<void*> blocks = allocate_some();
  alloc_->deallocate(blocks[0]);  // pending on b_
  alloc_.reset();
  sim_->complete_all();
  expect_nothing_held("after destroying an allocator with live allocations");
}

// The cudaMallocAsync backend raises the release threshold of the device's default pool to keep its
// cache; the program's own setting comes back when the allocator goes.
TEST(lifecycle_async, DefaultPoolSettingsAreRestored) {
  auto sim = std::make_shared<sim_driver>();
  auto alloc = make_allocator(parse_config("backend:cudaMallocAsync"), sim);
  mempool_t pool = nullptr;
  ASSERT_TRUE(sim->pool_get_default(0, &pool).ok());
  ASSERT_TRUE(sim->pool_set_attr(pool, pool_attr::release_threshold, 12345).ok());  // the program's own setting
  alloc->deallocate(alloc->allocate(1000));
  std::uint64_t value = 0;
  ASSERT_TRUE(sim->pool_get_attr(pool, pool_attr::release_threshold, &value).ok());
  EXPECT_EQ(value, std::numeric_limits<std::uint64_t>::max());  // raised while the allocator lives
  alloc.reset();
  ASSERT_TRUE(sim->pool_get_attr(pool, pool_attr::release_threshold, &value).ok());
  EXPECT_EQ(value, 12345u);
  EXPECT_EQ(sim->bytes_in_use(0), 0u);
}

INSTANTIATE_TEST_SUITE_P(all, lifecycle, ::testing::ValuesIn(lifecycle_cases()), stress_case_name);

}  // namespace
}  // namespace streampool::stress
