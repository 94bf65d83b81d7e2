// async_hot_path_test.cpp — pins the driver calls of the cudaMallocAsync backend's cache-hit path
// (Note [Hot path of the cudaMallocAsync backend] in async_device.cpp): an allocate is exactly one
// malloc_async and a deallocate exactly one free_async — no pool-attribute read, capture query,
// event or synchronisation — while the statistics read the pool's reserve only when asked for.
// record_stream and captured allocations add only the calls they need, counted here too.
#include <array>
#include <utility>

#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

class async_hot_path : public async_fixture {
 protected:
  /// Every counted driver call since the last reset_counters(), as (call, count) for non-zero ones.
  [[nodiscard]] std::vector<std::pair<driver_call, std::uint64_t>> calls_made() const {
    std::vector<std::pair<driver_call, std::uint64_t>> made;
    for (std::size_t i = 0; i < driver_call_count; ++i) {
      const auto call = static_cast<driver_call>(i);
      if (const std::uint64_t n = sim_->calls(call); n != 0) made.emplace_back(call, n);
    }
    return made;
  }

  [[nodiscard]] std::string describe_calls() const {
    std::string text;
    for (const auto& [call, n] : calls_made()) text += std::string(to_string(call)) + "=" + std::to_string(n) + " ";
    return text.empty() ? "none" : text;
  }

  [[nodiscard]] std::uint64_t total_calls() const {
    std::uint64_t total = 0;
    for (const auto& [call, n] : calls_made()) total += n;
    return total;
  }
};

TEST_F(async_hot_path, CacheHitPairIsOneMallocAsyncAndOneFreeAsync) {
  const stream_t stream = new_stream();
  alloc_->deallocate(alloc_->allocate(4096, stream, 0));  // device set-up and the pool's first chunk
  (void)alloc_->stats(0);
  constexpr int pairs = 100;
  sim_->reset_counters();
  for (int i = 0; i < pairs; ++i) {
    void* p = alloc_->allocate(4096, stream, 0);
    EXPECT_EQ(sim_->calls(driver_call::malloc_async), static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(total_calls(), static_cast<std::uint64_t>(2 * i + 1)) << describe_calls();
    alloc_->deallocate(p);
    EXPECT_EQ(sim_->calls(driver_call::free_async), static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(total_calls(), static_cast<std::uint64_t>(2 * i + 2)) << describe_calls();
  }
  EXPECT_EQ(total_calls(), 2u * pairs) << describe_calls();
}

TEST_F(async_hot_path, SameOnTheCurrentDeviceDefaultStreamAndWithHistoryOn) {
  alloc_->record_history(true);
  alloc_->deallocate(alloc_->allocate(100));
  sim_->reset_counters();
  for (const std::size_t size : {std::size_t{1}, std::size_t{100}, 3 * mib}) {
    alloc_->deallocate(alloc_->allocate(size));
  }
  // get_device is not a counted call (the interface resolves the current device, not the backend).
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 3u);
  EXPECT_EQ(sim_->calls(driver_call::free_async), 3u);
  EXPECT_EQ(total_calls(), 6u) << describe_calls();
  EXPECT_EQ(alloc_->trace(0).size(), 4u * 5u);  // every pair still traced: alloc 2 + free 3 entries
}

TEST_F(async_hot_path, StatisticsReadThePoolOnlyWhenAskedAndStayExact) {
  const stream_t stream = new_stream();
  void* held = alloc_->allocate(40 * mib, stream);  // makes the pool reserve a second chunk
  sim_->reset_counters();
  for (int i = 0; i < 10; ++i) alloc_->deallocate(alloc_->allocate(mib, stream));
  EXPECT_EQ(sim_->calls(driver_call::pool_get_attr), 0u);

  const memory_stats s = alloc_->stats(0);
  EXPECT_GT(sim_->calls(driver_call::pool_get_attr), 0u);  // the reserve is read now
  EXPECT_EQ(static_cast<std::uint64_t>(s.reserved_bytes[0].current),
            pool_attr_value(pool_of(0), pool_attr::reserved_mem_current));
  EXPECT_EQ(static_cast<std::uint64_t>(s.reserved_bytes[0].peak),
            pool_attr_value(pool_of(0), pool_attr::reserved_mem_high));
  EXPECT_EQ(s.num_device_alloc, 11);
  EXPECT_EQ(s.num_device_free, 10);
  EXPECT_EQ(s.allocated_bytes[0].current, static_cast<std::int64_t>(40 * mib));
  EXPECT_EQ(s.allocated_bytes[0].peak, static_cast<std::int64_t>(41 * mib));
  alloc_->deallocate(held);
}

TEST_F(async_hot_path, RecordStreamAddsOneEventRecordAndOneWaitPerStream) {
  const stream_t a = new_stream();
  const stream_t b = new_stream();
  void* warm = alloc_->allocate(4096, a);
  alloc_->record_stream(warm, b);
  alloc_->deallocate(warm);  // the event pool has an event now
  sim_->reset_counters();
  void* p = alloc_->allocate(4096, a);
  alloc_->record_stream(p, b);
  alloc_->record_stream(p, a);  // the allocation stream: no effect, no call
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 1u);
  EXPECT_EQ(sim_->calls(driver_call::event_record), 1u);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 1u);
  EXPECT_EQ(sim_->calls(driver_call::free_async), 1u);
  // The handle's lookup (Note [record_stream of a bad stream on cudaMallocAsync]): host-side, once
  // for the other stream, none for the allocation stream, as on native.
  EXPECT_EQ(sim_->calls(driver_call::stream_get_device), 1u);
  EXPECT_EQ(total_calls(), 5u) << describe_calls();
}

// Changed with Note [Private pools of the cudaMallocAsync backend]: a captured allocation used to
// cost a malloc_async, and its free a capture query and a free_async (graph memory nodes). Now a
// block of the private pool, freed back to it, is reused with no driver call at all.
TEST_F(async_hot_path, CapturedAllocationReusedFromItsPrivatePoolCostsNoDriverCall) {
  const stream_t capturing = new_stream();
  sim_->set_capture(capturing, capture_status::active, 9);
  const mempool_id pool = allocator::create_pool_id();
  alloc_->begin_allocate_to_pool(pool, [capturing](stream_t s) { return s == capturing; });
  const stream_t other = new_stream();
  alloc_->deallocate(alloc_->allocate(4096, capturing));  // the pool's block, made once
  sim_->reset_counters();

  void* captured = alloc_->allocate(4096, capturing);
  EXPECT_EQ(total_calls(), 0u) << describe_calls();
  alloc_->deallocate(captured);
  EXPECT_EQ(total_calls(), 0u) << describe_calls();

  // An allocation on a stream the recording does not route is a normal one, and its free during
  // the recording is parked without any driver call (Note [Deferred frees during capture]).
  sim_->reset_counters();
  void* outside = alloc_->allocate(4096, other);
  alloc_->deallocate(outside);
  EXPECT_EQ(sim_->calls(driver_call::malloc_async), 1u);
  EXPECT_EQ(total_calls(), 1u) << describe_calls();
  EXPECT_EQ(alloc_->stats(0).active[0].current, 1);  // parked

  sim_->set_capture(capturing, capture_status::none, 0);
  alloc_->end_allocate_to_pool(pool);
  EXPECT_EQ(alloc_->stats(0).active[0].current, 0);  // issued once the recording ended
}

}  // namespace
}  // namespace streampool::testing
