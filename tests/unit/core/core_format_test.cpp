// core_format_test.cpp — format_size (spec §2.10), stat arithmetic, PyTorch key names of
// memory_stats::to_map, the OOM message and the trace ring buffer.
#include <gtest/gtest.h>

#include "core/oom_message.hpp"
#include "core/trace_ring.hpp"
#include "streampool/config.hpp"
#include "streampool/stats.hpp"

namespace streampool {
namespace {

TEST(FormatSize, UsesPyTorchUnitsAndBoundaries) {
  EXPECT_EQ(format_size(0), "0 bytes");
  EXPECT_EQ(format_size(1024), "1024 bytes");
  EXPECT_EQ(format_size(1025), "1.00 KiB");
  EXPECT_EQ(format_size(1536 * 1024), "1.50 MiB");
  EXPECT_EQ(format_size(1048576), "1024.00 KiB");
  EXPECT_EQ(format_size(2 * 1048576), "2.00 MiB");
  EXPECT_EQ(format_size(std::size_t{3} * 1073741824 + 268435456), "3.25 GiB");
}

TEST(Stat, TracksCurrentPeakAllocatedFreed) {
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

TEST(MemoryStats, ToMapUsesPyTorchKeyNames) {
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
                          "num_sync_all_streams", "num_device_alloc", "num_device_free", "max_split_size"}) {
    EXPECT_EQ(map.count(key), 1u) << key;
  }
  EXPECT_NE(stats.to_json().find("\"allocated_bytes.all.current\":1024"), std::string::npos);
}

TEST(MemoryStats, ResetAccumulatedClearsCountersButKeepsCurrent) {
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

detail::oom_figures fragmented_figures() {
  detail::oom_figures f;
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

TEST(OomMessage, NamesTheFiguresAndFragmentation) {
  const std::string message = detail::build_oom_message(fragmented_figures());
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

TEST(OomMessage, SaysFullWhenTheRequestDoesNotFitInCachedMemory) {
  detail::oom_figures f = fragmented_figures();
  f.alloc_size = f.requested = 200 * mib;
  f.allowed = 1 * gib;
  const std::string message = detail::build_oom_message(f);
  EXPECT_EQ(message.find("Fragmentation"), std::string::npos) << message;
  EXPECT_NE(message.find("1024.00 MiB allowed"), std::string::npos) << message;
  EXPECT_NE(message.find("per_process_memory_fraction"), std::string::npos) << message;
}

TEST(TraceRing, OffByDefaultKeepsLastEntriesOldestFirst) {
  detail::trace_ring ring;
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

TEST(TraceCsv, MatchesTheSharedTraceFormat) {
  std::vector<trace_entry> entries(2);
  entries[0] = {trace_action::segment_alloc, 0, 4096, 2 * mib, nullptr, {}, 7};
  entries[1] = {trace_action::free_completed, 0, 4096, 512, reinterpret_cast<stream_t>(0x10), {}, 9};
  EXPECT_EQ(trace_to_csv(entries),
            "action,addr,size,stream,time_us\nsegment_alloc,4096,2097152,0,7\nfree_completed,4096,512,16,9\n");
}

}  // namespace
}  // namespace streampool
