// core_format_test.cpp — format_size (docs/pytorch-compatibility.md §2.10), stat arithmetic, PyTorch key names of
// memory_stats::to_map, the OOM message and the trace ring buffer.
#include <gtest/gtest.h>

#include "core/oom_message.hpp"
#include "core/trace_ring.hpp"
#include "streampool/config.hpp"
#include "streampool/stats.hpp"

namespace streampool {
namespace {

TEST(format_size, UsesPyTorchUnitsAndBoundaries) {
  EXPECT_EQ(format_size(0), "0 bytes");
  EXPECT_EQ(format_size(1024), "1024 bytes");
  EXPECT_EQ(format_size(1025), "1.00 KiB");
  EXPECT_EQ(format_size(1536 * 1024), "1.50 MiB");
  EXPECT_EQ(format_size(1048576), "1024.00 KiB");
  EXPECT_EQ(format_size(2 * 1048576), "2.00 MiB");
  EXPECT_EQ(format_size(std::size_t{3} * 1073741824 + 268435456), "3.25 GiB");
}

TEST(stat, TracksCurrentPeakAllocatedFreed) {
  stat s;
  s.increase(10);
  s.increase(5);
  s.decrease(12);
  EXPECT_EQ(s.current, 3);
  EXPECT_EQ(s.peak, 15);
  EXPECT_EQ(s.allocated, 15);
  EXPECT_EQ(s.freed, 12);
  s.reset_peak();
  EXPECT_EQ(s.peak, 3);
  s.reset_accumulated();
  EXPECT_EQ(s.allocated, 0);
  EXPECT_EQ(s.freed, 0);
  EXPECT_EQ(s.current, 3);
}

TEST(memory_stats, ToMapUsesPyTorchKeyNames) {
  memory_stats stats;
  stats.allocated_bytes[0].increase(1024);
  stats.allocated_bytes[1].increase(1024);
  stats.num_ooms = 2;
  const auto map = stats.to_map();
  EXPECT_EQ(map.at("allocated_bytes.all.current"), 1024);
  EXPECT_EQ(map.at("allocated_bytes.small_pool.peak"), 1024);
  EXPECT_EQ(map.at("allocated_bytes.large_pool.current"), 0);
  EXPECT_EQ(map.at("num_ooms"), 2);
  for (const char* key : {"allocation.all.current", "segment.large_pool.freed", "active.all.peak",
                          "inactive_split.all.current", "reserved_bytes.all.peak", "active_bytes.all.current",
                          "inactive_split_bytes.all.current", "requested_bytes.all.allocated",
                          "oversize_allocations.current", "oversize_segments.peak", "num_alloc_retries",
                          "num_sync_all_streams", "num_device_alloc", "num_device_free", "max_split_size",
                          "num_cross_stream_reuses", "num_cross_stream_waits", "num_cross_stream_fences",
                          "num_fence_host_waits", "num_moved_pages"}) {
    EXPECT_EQ(map.count(key), 1u) << key;
  }
  EXPECT_NE(stats.to_json().find("\"allocated_bytes.all.current\":1024"), std::string::npos);
}

TEST(memory_stats, ResetAccumulatedClearsCountersButKeepsCurrent) {
  memory_stats stats;
  stats.segment[0].increase(3);
  stats.num_device_alloc = 3;
  stats.num_alloc_retries = 1;
  stats.reset_accumulated();
  EXPECT_EQ(stats.segment[0].current, 3);
  EXPECT_EQ(stats.segment[0].allocated, 0);
  EXPECT_EQ(stats.num_device_alloc, 0);
  EXPECT_EQ(stats.num_alloc_retries, 0);
}

core::oom_figures fragmented_figures() {
  core::oom_figures f;
  f.device = 0;
  f.requested = 30 * mib;
  f.alloc_size = 30 * mib;
  f.device_total = 80 * gib;
  f.device_free = 10 * mib;
  f.allocated = 40 * mib;
  f.reserved = 100 * mib;
  f.largest_free_block = 20 * mib;
  f.cached_per_stream = {{nullptr, 60 * mib}};
  return f;
}

TEST(oom_message, NamesTheFiguresAndFragmentation) {
  const std::string message = core::build_oom_message(fragmented_figures());
  EXPECT_NE(message.find("Tried to allocate 30.00 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("total capacity of 80.00 GiB of which 10.00 MiB is free"), std::string::npos) << message;
  EXPECT_NE(message.find("40.00 MiB is allocated by streampool"), std::string::npos) << message;
  EXPECT_NE(message.find("60.00 MiB is reserved by streampool but unallocated"), std::string::npos) << message;
  EXPECT_NE(message.find("largest free block: 20.00 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("0x0=60.00 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("Fragmentation is the cause"), std::string::npos) << message;
  EXPECT_NE(message.find("expandable_segments:True"), std::string::npos) << message;
  EXPECT_NE(message.find("max_split_size_mb"), std::string::npos) << message;
}

TEST(oom_message, SaysFullWhenTheRequestDoesNotFitInCachedMemory) {
  core::oom_figures f = fragmented_figures();
  f.alloc_size = f.requested = 200 * mib;
  f.allowed = 1 * gib;
  const std::string message = core::build_oom_message(f);
  EXPECT_EQ(message.find("Fragmentation"), std::string::npos) << message;
  EXPECT_NE(message.find("1024.00 MiB allowed"), std::string::npos) << message;
  EXPECT_NE(message.find("per_process_memory_fraction"), std::string::npos) << message;
}

// Each cause of Note [OOM message] (src/core/oom_message.cpp), with its figures; "is full" only
// in the last one.
bool says(const std::string& message, const char* text) { return message.find(text) != std::string::npos; }

TEST(oom_message, ARequestLargerThanTheDeviceIsNotCalledFull) {
  core::oom_figures f = fragmented_figures();
  f.alloc_size = f.requested = 81 * gib;  // more than the 80 GiB device
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "The request is larger than the device's total capacity (80.00 GiB)")) << message;
  EXPECT_TRUE(says(message, "no amount of freed memory or allocator setting makes it fit")) << message;
  EXPECT_FALSE(says(message, "is full")) << message;
  EXPECT_FALSE(says(message, "Fragmentation")) << message;
  EXPECT_FALSE(says(message, "expandable_segments")) << "no key helps: " << message;
}

TEST(oom_message, ARequestLargerThanTheCapNamesTheCap) {
  core::oom_figures f = fragmented_figures();
  f.allowed = 1 * gib;
  f.alloc_size = f.requested = 2 * gib;  // fits the device, not the cap
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "The request is larger than the per-process cap (1024.00 MiB)")) << message;
  EXPECT_TRUE(says(message, "raise per_process_memory_fraction")) << message;
  EXPECT_FALSE(says(message, "is full")) << message;
}

TEST(oom_message, ARequestLargerThanTheDeviceOnAStreamOrderedPool) {
  core::oom_figures f = fragmented_figures();
  f.stream_ordered_pool = true;
  f.backend = "cudaMallocAsync";
  f.alloc_size = f.requested = 100 * gib;
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "larger than the device's total capacity (80.00 GiB)")) << message;
  EXPECT_FALSE(says(message, "is full")) << message;
}

TEST(oom_message, TheCapIsTheLimitWhenTheDeviceHasTheMemory) {
  core::oom_figures f = fragmented_figures();
  f.allowed = 120 * mib;     // reserved 100 MiB + 30 MiB > 120 MiB
  f.device_free = 40 * gib;  // the device has it
  f.largest_free_block = 10 * mib;
  f.reserved = 100 * mib;
  f.allocated = 90 * mib;           // 10 MiB unallocated: does not fit
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "The per-process cap is the limit, not the device: 40.00 GiB is free on the device")) << message;
  EXPECT_TRUE(says(message, "120.00 MiB allowed")) << message;
  EXPECT_FALSE(says(message, "is full")) << message;
}

TEST(oom_message, FreePlusCachedMemoryThatWouldFitIsNotFull) {
  core::oom_figures f = fragmented_figures();
  f.alloc_size = f.requested = 64 * mib;
  f.device_free = 30 * mib;   // alone too small
  f.reserved = 100 * mib;
  f.allocated = 60 * mib;     // 40 MiB unallocated: alone too small, together 70 MiB >= 64 MiB
  f.largest_free_block = 20 * mib;
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "The device is not full: its 30.00 MiB free and the 40.00 MiB reserved but unallocated "
                            "would hold the request together")) << message;
  EXPECT_TRUE(says(message, "expandable_segments:True")) << message;
  EXPECT_FALSE(says(message, "is full")) << message;
  f.expandable_segments = true;
  const std::string with_expandable = core::build_oom_message(f);
  EXPECT_TRUE(says(with_expandable, "Free long-lived allocations")) << with_expandable;
  EXPECT_FALSE(says(with_expandable, "Set STREAMPOOL_ALLOC_CONF=expandable_segments")) << with_expandable;
}

TEST(oom_message, ABlockCachedForAnotherStreamIsNotFull) {
  core::oom_figures f = fragmented_figures();
  f.largest_free_block = 60 * mib;  // >= the 30 MiB request, but on another stream
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "The device is not full: a free block of 60.00 MiB is cached, but for another stream"))
      << message;
  EXPECT_TRUE(says(message, "call empty_cache()")) << message;
  EXPECT_FALSE(says(message, "private pool")) << "no private pool holds memory: " << message;
  EXPECT_FALSE(says(message, "is full")) << message;
  f.private_pool_free = 60 * mib;
  EXPECT_TRUE(says(core::build_oom_message(f), "or in a private pool"));
}

TEST(oom_message, FullOnlyWhenNothingWouldHoldIt) {
  core::oom_figures f = fragmented_figures();
  f.alloc_size = f.requested = 1 * gib;
  f.device_free = 100 * mib;       // + 60 MiB unallocated < 1 GiB
  const std::string message = core::build_oom_message(f);
  EXPECT_TRUE(says(message, "The device is full: free memory or lower the batch size.")) << message;
  // 80 GiB - 100 MiB used, of which streampool reserved 100 MiB: the rest is held elsewhere.
  EXPECT_TRUE(says(message, "79.80 GiB of the device's memory is used outside streampool")) << message;
  f.device_total = 2 * gib;  // 2048 MiB: 100 free, 1536 reserved (50 unallocated), 412 elsewhere < 1 GiB
  f.reserved = 1536 * mib;
  f.allocated = 1486 * mib;
  const std::string small_elsewhere = core::build_oom_message(f);
  EXPECT_TRUE(says(small_elsewhere, "The device is full")) << small_elsewhere;
  EXPECT_FALSE(says(small_elsewhere, "used outside streampool")) << small_elsewhere;
}

TEST(trace_ring, OffByDefaultKeepsLastEntriesOldestFirst) {
  core::trace_ring ring;
  ring.record(trace_action::alloc, 0, 1, 1, nullptr);
  EXPECT_TRUE(ring.entries().empty());
  ring.configure(true, 3);
  for (std::uintptr_t i = 1; i <= 5; ++i) ring.record(trace_action::alloc, 0, i, i * 10, nullptr);
  const auto entries = ring.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].address, 3u);
  EXPECT_EQ(entries[2].address, 5u);
  EXPECT_EQ(entries[2].size, 50u);
  ring.configure(false, 0);
  EXPECT_TRUE(ring.entries().empty());
}

TEST(trace_csv, MatchesTheSharedTraceFormat) {
  std::vector<trace_entry> entries(2);
  entries[0] = {trace_action::segment_alloc, 0, 4096, 2 * mib, nullptr, {}, 7};
  entries[1] = {trace_action::free_completed, 0, 4096, 512, reinterpret_cast<stream_t>(0x10), {}, 9};
  EXPECT_EQ(trace_to_csv(entries),
            "action,addr,size,stream,time_us\nsegment_alloc,4096,2097152,0,7\nfree_completed,4096,512,16,9\n");
}

}  // namespace
}  // namespace streampool
