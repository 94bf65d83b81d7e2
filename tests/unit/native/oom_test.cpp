// The OOM ladder (docs/pytorch-compatibility.md §2.3 step 4, §2.10), the memory-fraction cap (§2.12), garbage collection
// (§2.11), empty_cache (§2.12) and the out-of-memory error.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

constexpr auto i64 = [](std::size_t v) { return static_cast<std::int64_t>(v); };

sim_options capacity(std::size_t bytes) {
  sim_options o;
  o.capacity = bytes;
  return o;
}

std::vector<trace_action> actions(const std::vector<trace_entry>& entries) {
  std::vector<trace_action> out;
  for (const trace_entry& e : entries) out.push_back(e.action);
  return out;
}

TEST(oom_ladder, ReleaseAllFreesCachedSegmentsThenRetrySucceeds) {
  native_env env("", capacity(100 * MiB));
  const stream_t a = env.new_stream();
  const stream_t b = env.new_stream();
  void* cached = env.alloc->allocate(40 * MiB, a);
  void* live = env.alloc->allocate(50 * MiB, a);
  env.alloc->deallocate(cached);
  env.alloc->record_history(true);
  void* p = env.alloc->allocate(30 * MiB, b);  // 10 MiB free on the device: needs a's cache
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.reserved_bytes[all].current, i64(80 * MiB));
  const auto trace = env.alloc->trace();
  const std::vector<trace_action> expected = {trace_action::segment_free, trace_action::segment_alloc,
                                              trace_action::alloc};
  EXPECT_EQ(actions(trace), expected);
  EXPECT_EQ(trace[0].address, addr(cached));
  EXPECT_EQ(trace[0].size, 40 * MiB);
  env.alloc->deallocate(p);
  env.alloc->deallocate(live);
}

TEST(oom_ladder, InjectedMallocFailureIsRetriedOnce) {
  native_env env;
  env.sim->fail_next(driver_call::malloc, 1);
  void* p = env.alloc->allocate(4096);
  memory_stats s = env.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(env.calls(driver_call::malloc), 2u);
  env.alloc->deallocate(p);
  env.sim->fail_next(driver_call::malloc, 2);
  EXPECT_THROW((void)env.alloc->allocate(4 * MiB), out_of_memory);
  s = env.stats();
  EXPECT_EQ(s.num_alloc_retries, 2);
  EXPECT_EQ(s.num_ooms, 1);
  void* q = env.alloc->allocate(4 * MiB);  // the allocator keeps working
  EXPECT_NE(q, nullptr);
  env.alloc->deallocate(q);
}

TEST(oom_ladder, NonOomDriverErrorIsACudaError) {
  native_env env;
  env.sim->fail_next(driver_call::malloc, 1, status::other);
  EXPECT_THROW((void)env.alloc->allocate(4096), cuda_error);
  EXPECT_EQ(env.stats().num_alloc_retries, 0);
  EXPECT_EQ(env.stats().segment[all].current, 0);
}

TEST(oom_ladder, OversizeReleaseComesBeforeReleaseAll) {
  native_env env("max_split_size_mb:20", capacity(90 * MiB));
  const stream_t a = env.new_stream();
  void* small_cached = env.alloc->allocate(4096, a);
  void* big = env.alloc->allocate(70 * MiB, a);
  env.alloc->deallocate(big);
  env.alloc->deallocate(small_cached);
  // 25 MiB cannot reuse the 70 MiB block (70 >= 25 + 20) and the device has 18 MiB free.
  void* p = env.alloc->allocate(25 * MiB, a);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.num_alloc_retries, 0) << "release_available_cached_blocks was enough";
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.segment[small].current, 1) << "the small cached segment was not released";
  EXPECT_EQ(s.oversize_segments.current, 1) << "the 26 MiB segment is oversize too";
  EXPECT_EQ(s.reserved_bytes[large].current, i64(26 * MiB));
  env.alloc->deallocate(p);
}

TEST(oom_ladder, OomErrorMessageAndFigures) {
  native_env env("", capacity(1 * GiB));
  env.alloc->record_history(true);
  void* keep = env.alloc->allocate(100 * MiB);
  const auto before = env.stats();
  try {
    (void)env.alloc->allocate(2 * GiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Tried to allocate 2.00 GiB"), std::string::npos) << what;
    EXPECT_NE(what.find("GPU 0 has a total capacity of 1024.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("924.00 MiB is free"), std::string::npos) << what;
    EXPECT_NE(what.find("100.00 MiB is allocated"), std::string::npos) << what;
    EXPECT_EQ(e.requested_bytes(), 2 * GiB);
    EXPECT_EQ(e.device(), 0);
  }
  const auto after = env.stats();
  EXPECT_EQ(after.num_ooms, 1);
  EXPECT_EQ(after.allocated_bytes[all].current, before.allocated_bytes[all].current);
  EXPECT_EQ(after.reserved_bytes[all].current, before.reserved_bytes[all].current);
  const auto trace = env.alloc->trace();
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.back().action, trace_action::oom);
  EXPECT_EQ(trace.back().address, 924 * MiB) << "device free bytes";
  EXPECT_EQ(trace.back().size, 2 * GiB);
  env.alloc->deallocate(keep);
}

TEST(oom_ladder, SucceedsAfterFreeingAndRetrying) {
  native_env env("", capacity(1 * GiB));
  void* a = env.alloc->allocate(600 * MiB);
  EXPECT_THROW((void)env.alloc->allocate(600 * MiB), out_of_memory);
  env.alloc->deallocate(a);
  void* b = env.alloc->allocate(600 * MiB);
  EXPECT_EQ(b, a) << "the cached block is reused";
  env.alloc->deallocate(b);
  EXPECT_EQ(env.stats().num_ooms, 1);
}

TEST(oom_ladder, FragmentationIsNamedInTheMessage) {
  native_env env("", capacity(40 * MiB));
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(env.alloc->allocate(4 * MiB));
  ASSERT_EQ(env.stats().segment[all].current, 2);
  for (int i = 0; i < 10; i += 2) env.alloc->deallocate(blocks[static_cast<std::size_t>(i)]);
  try {
    (void)env.alloc->allocate(12 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Fragmentation is the cause"), std::string::npos) << what;
    EXPECT_NE(what.find("largest free block: 4.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("expandable_segments:True"), std::string::npos) << what;
  }
  for (int i = 1; i < 10; i += 2) env.alloc->deallocate(blocks[static_cast<std::size_t>(i)]);
}

TEST(fraction, CapIsCheckedWithoutCallingTheDriver) {
  native_env env("per_process_memory_fraction:0.5", capacity(100 * MiB));
  EXPECT_DOUBLE_EQ(env.alloc->memory_fraction(), 0.5);
  void* a = env.alloc->allocate(40 * MiB);
  const auto mallocs = env.calls(driver_call::malloc);
  try {
    (void)env.alloc->allocate(20 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("50.00 MiB allowed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(env.calls(driver_call::malloc), mallocs) << "the cap refuses before cudaMalloc";
  void* b = env.alloc->allocate(10 * MiB);  // 50 MiB exactly is allowed
  env.alloc->set_memory_fraction(1.0);
  EXPECT_DOUBLE_EQ(env.alloc->memory_fraction(), 1.0);
  void* c = env.alloc->allocate(20 * MiB);
  for (void* p : {a, b, c}) env.alloc->deallocate(p);
}

TEST(fraction, ZeroForbidsNewSegmentsButCachedBlocksServe) {
  native_env env;
  void* p = env.alloc->allocate(4096);
  env.alloc->deallocate(p);
  env.alloc->set_memory_fraction(0.0);
  void* q = env.alloc->allocate(4096);
  EXPECT_EQ(q, p);
  EXPECT_THROW((void)env.alloc->allocate(3 * MiB), out_of_memory);
  env.alloc->deallocate(q);
}

// Issue 31: under per_process_memory_fraction:0 the message said "the device is not full" and
// recommended expandable_segments (a cap of 0 bytes was taken for no cap). Note [A cap of 0 bytes].
TEST(fraction, ZeroCapMessageSaysTheCapAllowsNothing) {
  for (const char* config : {"per_process_memory_fraction:0", "per_process_memory_fraction:0,expandable_segments:True"}) {
    native_env env(config, capacity(100 * MiB));
    std::string message;
    try {
      (void)env.alloc->allocate(3 * MiB);
      ADD_FAILURE() << config << ": expected out_of_memory";
    } catch (const out_of_memory& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("0 bytes allowed (per_process_memory_fraction)"), std::string::npos) << message;
    EXPECT_NE(message.find("The per-process cap is 0 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("raise per_process_memory_fraction"), std::string::npos) << message;
    EXPECT_EQ(message.find("not full"), std::string::npos) << message;
    EXPECT_EQ(message.find("expandable_segments:True"), std::string::npos) << message;
    EXPECT_EQ(message.find("Fragmentation"), std::string::npos) << message;
  }
}

TEST(garbage_collection, FreesOldestUnsplitBlocksFirst) {
  native_env env("garbage_collection_threshold:0.5", capacity(100 * MiB));
  env.alloc->set_memory_fraction(0.8);  // allowed 80 MiB, GC above 40 MiB reserved
  const stream_t a = env.new_stream();
  const stream_t ticker = env.new_stream();
  void* anchor = env.alloc->allocate(1 * MiB + MiB / 2, ticker);  // keeps a 20 MiB segment split
  auto tick = [&](int n) {
    for (int i = 0; i < n; ++i) env.alloc->deallocate(env.alloc->allocate(2 * MiB, ticker));
  };
  void* p1 = env.alloc->allocate(12 * MiB, a);
  void* p2 = env.alloc->allocate(14 * MiB, a);
  void* p3 = env.alloc->allocate(16 * MiB, a);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, i64(62 * MiB));
  env.alloc->deallocate(p1);
  tick(25);
  env.alloc->deallocate(p2);
  tick(1);
  env.alloc->deallocate(p3);
  tick(4);
  env.alloc->record_history(true);
  void* q = env.alloc->allocate(20 * MiB, a);  // no free block fits: GC, then a new segment
  const auto trace = env.alloc->trace();
  ASSERT_GE(trace.size(), 3u);
  EXPECT_EQ(trace[0].action, trace_action::segment_free);
  EXPECT_EQ(trace[0].address, addr(p1)) << "oldest first";
  EXPECT_EQ(trace[1].action, trace_action::segment_free);
  EXPECT_EQ(trace[1].address, addr(p2));
  EXPECT_EQ(trace[2].action, trace_action::segment_alloc);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.reserved_bytes[all].current, i64((20 + 16 + 20) * MiB)) << "p3 (youngest) stays cached";
  EXPECT_EQ(s.num_alloc_retries, 0);
  env.alloc->deallocate(q);
  env.alloc->deallocate(anchor);
}

TEST(garbage_collection, InertWithoutFraction) {
  native_env env("garbage_collection_threshold:0.5", capacity(100 * MiB));
  void* p = env.alloc->allocate(30 * MiB);
  env.alloc->deallocate(p);
  void* q = env.alloc->allocate(40 * MiB);
  EXPECT_EQ(env.stats().reserved_bytes[all].current, i64(70 * MiB)) << "nothing collected";
  env.alloc->deallocate(q);
}

TEST(empty_cache, FreesOnlyUnsplitSegments) {
  native_env env;
  void* a = env.alloc->allocate(4096);  // small segment, stays split by b
  void* b = env.alloc->allocate(4096);
  void* live = env.alloc->allocate(12 * MiB);  // a 12 MiB segment of its own
  void* c = env.alloc->allocate(3 * MiB);      // large segment, wholly free after the free below
  env.alloc->deallocate(a);
  env.alloc->deallocate(c);
  env.sim->reset_counters();
  env.alloc->empty_cache();
  EXPECT_EQ(env.calls(driver_call::free), 1u);
  const memory_stats s = env.stats();
  EXPECT_EQ(s.segment[all].current, 2);
  EXPECT_EQ(s.reserved_bytes[all].current, i64(2 * MiB + 12 * MiB));
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.num_device_free, 1);
  env.alloc->deallocate(b);
  env.alloc->deallocate(live);
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.stats().num_sync_all_streams, 2);
}

}  // namespace
}  // namespace streampool::test
