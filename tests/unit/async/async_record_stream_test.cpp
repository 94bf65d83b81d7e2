// async_record_stream_test.cpp — record_stream in the cudaMallocAsync backend (Note [record_stream
// by stream wait]): the free is ordered on the device after the recorded streams' work, with
// pooled events and no host synchronisation or event query. Runs the sim in non-eager mode, where
// work completes only when the test says so.
#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

class async_record_stream : public async_fixture {
 protected:
  void SetUp() override {
    sim_options options;
    options.eager_completion = false;
    make(options);
    a_ = new_stream();
    b_ = new_stream();
    c_ = new_stream();
  }

  /// Pending work on `stream` (a kernel using the memory, as far as the sim is concerned).
  event_t submit_work(stream_t stream) {
    event_t event = nullptr;
    EXPECT_TRUE(sim_->event_create(0, &event).ok());
    EXPECT_TRUE(sim_->event_record(event, stream).ok());
    return event;
  }

  stream_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

TEST_F(async_record_stream, FreeWaitsForTheRecordedStream) {
  void* p = alloc_->allocate(mib, a_);
  const event_t work_on_b = submit_work(b_);
  alloc_->record_stream(p, b_);
  const auto records = sim_->calls(driver_call::event_record);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 1u);
  EXPECT_EQ(sim_->calls(driver_call::event_record), records + 1);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 0u);
  EXPECT_EQ(sim_->calls(driver_call::stream_synchronize), 0u);
  EXPECT_EQ(sim_->calls(driver_call::event_query), 0u);

  // While B's work is pending, the block is not handed to another stream.
  void* q = alloc_->allocate(mib, c_);
  EXPECT_NE(q, p);
  EXPECT_EQ(sim_->event_query(work_on_b).code, status::not_ready);

  // The free on A is ordered after B: completing A's free completes B's earlier work first.
  sim_->complete(a_);
  EXPECT_TRUE(sim_->event_query(work_on_b).ok());

  // Now the free has executed and the block may serve another stream.
  void* r = alloc_->allocate(mib, c_);
  EXPECT_EQ(r, p);
  alloc_->deallocate(q);
  alloc_->deallocate(r);
}

TEST_F(async_record_stream, WithoutRecordStreamTheFreeDoesNotWait) {
  void* p = alloc_->allocate(mib, a_);
  const event_t work_on_b = submit_work(b_);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 0u);
  sim_->complete(a_);
  EXPECT_EQ(sim_->event_query(work_on_b).code, status::not_ready);  // no dependency on B was added
  EXPECT_EQ(alloc_->allocate(mib, c_), p);  // the free completed: reusable by another stream
}

TEST_F(async_record_stream, RecordingTheAllocationStreamHasNoEffect) {
  void* p = alloc_->allocate(mib, a_);
  const auto records = sim_->calls(driver_call::event_record);
  alloc_->record_stream(p, a_);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 0u);
  EXPECT_EQ(sim_->calls(driver_call::event_record), records);
}

TEST_F(async_record_stream, EachStreamIsWaitedOnOnce) {
  void* p = alloc_->allocate(mib, a_);
  alloc_->record_stream(p, b_);
  alloc_->record_stream(p, b_);
  alloc_->record_stream(p, c_);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 2u);
}

TEST_F(async_record_stream, EventsArePooledNotCreatedPerFree) {
  for (int i = 0; i < 20; ++i) {
    void* p = alloc_->allocate(mib, a_);
    alloc_->record_stream(p, b_);
    alloc_->deallocate(p);
  }
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 20u);
  EXPECT_EQ(sim_->calls(driver_call::event_create), 1u);  // one event, re-recorded each time
  EXPECT_EQ(sim_->calls(driver_call::event_destroy), 0u);
}

TEST_F(async_record_stream, FailedWaitFallsBackToSynchronising) {
  void* p = alloc_->allocate(mib, a_);
  const event_t work_on_b = submit_work(b_);
  alloc_->record_stream(p, b_);
  sim_->fail_next(driver_call::stream_wait_event, 1, status::other);
  alloc_->deallocate(p);
  EXPECT_EQ(sim_->calls(driver_call::device_synchronize), 1u);
  EXPECT_TRUE(sim_->event_query(work_on_b).ok());  // B's work was waited for by the host
  const memory_stats s = alloc_->stats(0);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.allocation[0].current, 0);
}

TEST_F(async_record_stream, FailedWaitAndSyncLeaveTheAllocationLive) {
  void* p = alloc_->allocate(mib, a_);
  alloc_->record_stream(p, b_);
  const auto before = stats_map();
  sim_->fail_next(driver_call::stream_wait_event, 1, status::other);
  sim_->fail_next(driver_call::device_synchronize, 1, status::other);
  EXPECT_THROW(alloc_->deallocate(p), cuda_error);
  EXPECT_EQ(stats_map(), before);
  EXPECT_EQ(sim_->calls(driver_call::free_async), 0u);
  alloc_->deallocate(p);  // still live, still recorded on B
  EXPECT_EQ(sim_->calls(driver_call::free_async), 1u);
  EXPECT_EQ(sim_->calls(driver_call::stream_wait_event), 2u);
}

TEST(async_record_stream_devices, StreamOfAnotherDeviceIsWaitedForByTheHost) {
  sim_options options;
  options.device_count = 2;
  options.eager_completion = false;
  auto sim = std::make_shared<sim_driver>(options);
  const std::unique_ptr<allocator> alloc = async::make_async_allocator(parse_config("backend:cudaMallocAsync"), sim);
  stream_t other_device_stream = nullptr;
  ASSERT_TRUE(sim->stream_create(1, &other_device_stream).ok());
  void* p = alloc->allocate(mib, nullptr, 0);
  alloc->record_stream(p, other_device_stream);
  alloc->deallocate(p);  // the device-0 event cannot be recorded on a device-1 stream
  EXPECT_EQ(sim->calls(driver_call::device_synchronize), 2u);
  EXPECT_EQ(alloc->stats(0).allocation[0].current, 0);
  EXPECT_EQ(sim->calls(driver_call::free_async), 1u);
}

}  // namespace
}  // namespace streampool::testing
