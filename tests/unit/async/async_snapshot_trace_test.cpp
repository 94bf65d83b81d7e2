// async_snapshot_trace_test.cpp — snapshots (each live allocation a one-block segment, consistent
// with the statistics) and the allocation trace (alloc/free with mirrored segment entries, oom,
// snapshot; ring buffer) of the cudaMallocAsync backend.
#include <algorithm>

#include "async_test_support.hpp"

namespace streampool::testing {
namespace {

using async_snapshot = async_fixture;
using async_trace = async_fixture;

TEST_F(async_snapshot, LiveAllocationsAreOneBlockSegments) {
  const stream_t stream = new_stream();
  void* small = alloc_->allocate(100, stream);
  void* large = alloc_->allocate(3 * mib);
  alloc_->deallocate(alloc_->allocate(5000));  // freed: not in the snapshot
  const memory_snapshot snap = alloc_->snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  EXPECT_LT(snap.segments[0].address, snap.segments[1].address);  // sorted by address
  for (const segment_info& segment : snap.segments) {
    const bool is_small = segment.address == reinterpret_cast<std::uintptr_t>(small);
    EXPECT_TRUE(is_small || segment.address == reinterpret_cast<std::uintptr_t>(large));
    EXPECT_EQ(segment.device, 0);
    EXPECT_FALSE(segment.is_expandable);
    EXPECT_TRUE(segment.pool.is_default());
    EXPECT_EQ(segment.is_large, !is_small);
    EXPECT_EQ(segment.stream, is_small ? stream : nullptr);
    EXPECT_EQ(segment.total_size, is_small ? 512u : 3 * mib);
    EXPECT_EQ(segment.requested_size, is_small ? 100u : 3 * mib);
    EXPECT_EQ(segment.allocated_size, segment.total_size);
    ASSERT_EQ(segment.blocks.size(), 1u);
    EXPECT_EQ(segment.blocks[0].address, segment.address);
    EXPECT_EQ(segment.blocks[0].size, segment.total_size);
    EXPECT_EQ(segment.blocks[0].state, block_state::active_allocated);
  }
  EXPECT_EQ(snap.allocator_settings, "backend:cudaMallocAsync");
  const std::string json = snap.to_json();
  EXPECT_NE(json.find("\"state\":\"active_allocated\""), std::string::npos);
  EXPECT_NE(json.find("\"is_expandable\":false"), std::string::npos);
  alloc_->deallocate(small);
  alloc_->deallocate(large);
  EXPECT_TRUE(alloc_->snapshot().segments.empty());
}

TEST_F(async_snapshot, AgreesWithTheStatistics) {
  std::vector<void*> live;
  for (std::size_t size : {1u, 511u, 513u, 4096u, 1048576u, 1048577u, 7000000u}) live.push_back(alloc_->allocate(size));
  alloc_->deallocate(live[2]);
  const memory_snapshot snap = alloc_->snapshot();
  const memory_stats stats = alloc_->stats(0);
  std::int64_t allocated = 0, active = 0, requested = 0, large_segments = 0;
  for (const segment_info& s : snap.segments) {
    allocated += static_cast<std::int64_t>(s.allocated_size);
    active += static_cast<std::int64_t>(s.active_size);
    requested += static_cast<std::int64_t>(s.requested_size);
    large_segments += s.is_large ? 1 : 0;
  }
  EXPECT_EQ(static_cast<std::int64_t>(snap.segments.size()), stats.segment[0].current);
  EXPECT_EQ(large_segments, stats.segment[2].current);
  EXPECT_EQ(allocated, stats.allocated_bytes[0].current);
  EXPECT_EQ(active, stats.active_bytes[0].current);
  EXPECT_EQ(requested, stats.requested_bytes[0].current);
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i != 2) alloc_->deallocate(live[i]);
  }
}

TEST_F(async_snapshot, CoversEveryUsedDevice) {
  sim_options options;
  options.device_count = 3;
  make(options);
  void* a = alloc_->allocate(100, nullptr, 0);
  void* b = alloc_->allocate(100, nullptr, 2);
  const memory_snapshot snap = alloc_->snapshot();
  ASSERT_EQ(snap.segments.size(), 2u);
  EXPECT_EQ(snap.segments[0].device + snap.segments[1].device, 2);
  alloc_->deallocate(a);
  alloc_->deallocate(b);
}

TEST_F(async_trace, AllocAndFreeWithMirroredSegmentEntries) {
  const stream_t stream = new_stream();
  alloc_->record_history(true);
  void* p = alloc_->allocate(100, stream);
  alloc_->deallocate(p);
  const std::vector<trace_entry> trace = alloc_->trace(0);
  const std::vector<trace_action> expected{trace_action::segment_alloc, trace_action::alloc,
                                           trace_action::free_requested, trace_action::free_completed,
                                           trace_action::segment_free};
  ASSERT_EQ(trace.size(), expected.size());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].action, expected[i]) << i;
    EXPECT_EQ(trace[i].address, reinterpret_cast<std::uintptr_t>(p));
    EXPECT_EQ(trace[i].stream, stream);
    EXPECT_EQ(trace[i].device, 0);
    EXPECT_EQ(trace[i].size, (expected[i] == trace_action::segment_alloc || expected[i] == trace_action::segment_free)
                                 ? 512u
                                 : 100u);
  }
  EXPECT_LE(trace.front().time_us, trace.back().time_us);
  const std::string csv = trace_to_csv(trace);
  EXPECT_NE(csv.find("free_completed,"), std::string::npos);
}

TEST_F(async_trace, SnapshotIsTracedAndReturned) {
  alloc_->record_history(true);
  void* p = alloc_->allocate(4096);
  const memory_snapshot snap = alloc_->snapshot();
  ASSERT_FALSE(snap.trace.empty());
  EXPECT_EQ(snap.trace.back().action, trace_action::snapshot);
  EXPECT_EQ(snap.trace.back().size, 4096u);  // active bytes
  alloc_->deallocate(p);
}

TEST_F(async_trace, OffByDefaultRingKeepsTheLastEntriesAndOffClears) {
  alloc_->deallocate(alloc_->allocate(100));
  EXPECT_TRUE(alloc_->trace(0).empty());
  alloc_->record_history(true, 3);
  void* p = alloc_->allocate(100);
  alloc_->deallocate(p);
  const std::vector<trace_entry> trace = alloc_->trace(0);
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0].action, trace_action::free_requested);
  EXPECT_EQ(trace[2].action, trace_action::segment_free);
  alloc_->record_history(false);
  EXPECT_TRUE(alloc_->trace(0).empty());
}

}  // namespace
}  // namespace streampool::testing
