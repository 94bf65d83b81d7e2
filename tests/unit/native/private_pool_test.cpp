// Private pools and graph capture (docs/pytorch-compatibility.md §3.1–§3.4): routing by filter (newest first), use counts,
// release only through empty_cache once unused, and the capture-safety rules of
// Note [Deferred frees during capture]: no event query/sync and no cudaFree while a capture is
// underway (the sim refuses them while a stream is set capturing), relaxed cudaMalloc.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

constexpr auto i64 = [](std::size_t v) { return static_cast<std::int64_t>(v); };

stream_filter only(stream_t s) {
  return [s](stream_t candidate) { return candidate == s; };
}

struct capture_env : native_env {
  stream_t cap = new_stream();
  stream_t side = new_stream();
  mempool_id pool = allocator::create_pool_id();

  capture_env() : native_env("", lazy_options()) {}
  static sim_options lazy_options() {
    sim_options o;
    o.eager_completion = false;
    return o;
  }
  void begin() {
    alloc->begin_allocate_to_pool(pool, only(cap));
    sim->set_capture(cap, capture_status::active, 7);
  }
  void end() {
    sim->set_capture(cap, capture_status::none, 0);
    alloc->end_allocate_to_pool(pool);
  }
};

TEST(private_pool, RoutesMatchingStreamsOnly) {
  capture_env env;
  env.begin();
  void* in_pool = env.alloc->allocate(4096, env.cap);
  void* outside = env.alloc->allocate(4096, env.side);
  env.end();
  for (const segment_info& s : env.segments()) {
    if (s.address <= addr(in_pool) && addr(in_pool) < s.address + s.total_size) {
      EXPECT_EQ(s.pool, env.pool);
    }
    if (s.address <= addr(outside) && addr(outside) < s.address + s.total_size) {
      EXPECT_TRUE(s.pool.is_default());
    }
  }
  EXPECT_EQ(env.native().pool_use_count(env.pool, 0), 1);
  env.alloc->deallocate(in_pool);
  env.alloc->deallocate(outside);
}

TEST(private_pool, NewestFilterWins) {
  native_env env;
  const stream_t s = env.new_stream();
  const mempool_id older = allocator::create_pool_id();
  const mempool_id newer = allocator::create_pool_id();
  env.alloc->begin_allocate_to_pool(older, only(s));
  env.alloc->begin_allocate_to_pool(newer, only(s));
  void* p = env.alloc->allocate(512, s);
  env.alloc->end_allocate_to_pool(newer);
  void* q = env.alloc->allocate(512, s);
  env.alloc->end_allocate_to_pool(older);
  std::map<std::uintptr_t, mempool_id> pool_of;
  for (const segment_info& seg : env.segments()) pool_of[seg.address] = seg.pool;
  ASSERT_EQ(pool_of.size(), 2u);
  EXPECT_EQ(pool_of.begin()->second, newer);
  EXPECT_EQ(std::next(pool_of.begin())->second, older);
  EXPECT_EQ(addr(p), pool_of.begin()->first);
  EXPECT_EQ(addr(q), std::next(pool_of.begin())->first);
  env.alloc->deallocate(p);
  env.alloc->deallocate(q);
}

TEST(private_pool, UseCountsAndErrors) {
  capture_env env;
  env.alloc->begin_allocate_to_pool(env.pool, only(env.cap));
  EXPECT_THROW(env.alloc->begin_allocate_to_pool(env.pool, only(env.cap)), error) << "already recording";
  env.alloc->end_allocate_to_pool(env.pool);
  EXPECT_THROW(env.alloc->end_allocate_to_pool(env.pool), error) << "not recording";
  env.alloc->begin_allocate_to_pool(env.pool, only(env.cap));  // a second graph shares the pool
  env.alloc->end_allocate_to_pool(env.pool);
  EXPECT_EQ(env.native().pool_use_count(env.pool, 0), 2);
  env.alloc->release_pool(env.pool);
  EXPECT_EQ(env.native().pool_use_count(env.pool, 0), 1);
  env.alloc->release_pool(env.pool);
  EXPECT_EQ(env.native().pool_use_count(env.pool, 0), 0);
  EXPECT_THROW(env.alloc->release_pool(env.pool), error);
  EXPECT_THROW(env.alloc->release_pool(allocator::create_pool_id()), error) << "unknown pool";
  EXPECT_THROW(env.alloc->begin_allocate_to_pool(mempool_id{}, only(env.cap)), error) << "default id";
}

TEST(private_pool, MemoryReleasedOnlyAfterReleasePoolAndEmptyCache) {
  capture_env env;
  env.begin();
  void* tmp = env.alloc->allocate(3 * MiB, env.cap);
  void* out = env.alloc->allocate(4096, env.cap);
  env.alloc->deallocate(tmp);  // frees within the pool behave normally during capture
  env.end();
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats().segment[all].current, 2) << "the pool is in use: nothing released";
  env.alloc->release_pool(env.pool);
  EXPECT_EQ(env.stats().segment[all].current, 2) << "release_pool alone releases nothing";
  env.alloc->empty_cache();
  memory_stats s = env.stats();
  EXPECT_EQ(s.segment[all].current, 1) << "the free large segment went; the live output's stays";
  EXPECT_EQ(s.reserved_bytes[all].current, i64(2 * MiB));
  env.alloc->deallocate(out);  // back to the (freeable) pool
  env.alloc->empty_cache();
  s = env.stats();
  EXPECT_EQ(s.segment[all].current, 0);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(env.native().pool_use_count(env.pool, 0), 0) << "the pool object is gone";
}

// docs/pytorch-compatibility.md §6 test_graph_memory_stats_and_use_result_after_destroy_graph.
TEST(private_pool, GraphMemoryStatsPerRequest) {
  const std::size_t requests[] = {512, 1 * MiB, 1 * MiB + 512, 10 * MiB - 512, 10 * MiB + 512};
  const std::size_t segment_bytes[] = {2 * MiB, 2 * MiB, 20 * MiB, 20 * MiB, 12 * MiB};
  for (std::size_t i = 0; i < 5; ++i) {
    capture_env env;
    const memory_stats before = env.stats();
    env.begin();
    void* tmp = env.alloc->allocate(requests[i], env.cap);
    void* out = env.alloc->allocate(requests[i], env.cap);
    env.alloc->deallocate(tmp);
    env.end();
    const memory_stats during = env.stats();
    // Two blocks of the request's size need one or two segments of the pool.
    const std::int64_t segs = during.segment[all].current - before.segment[all].current;
    EXPECT_EQ(during.reserved_bytes[all].current, segs * i64(segment_bytes[i])) << requests[i];
    EXPECT_EQ(during.active[all].current, 1);
    env.alloc->release_pool(env.pool);
    env.alloc->empty_cache();
    const memory_stats after = env.stats();
    EXPECT_EQ(after.segment[all].current, 1) << "only the surviving output's segment";
    EXPECT_EQ(after.reserved_bytes[all].current, i64(segment_bytes[i]));
    env.alloc->deallocate(out);
    env.alloc->empty_cache();
    EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  }
}

TEST(native_capture, NoEventQueryOrFreeWhileCaptureUnderway) {
  capture_env env;
  // A block used on `side` and freed during the capture.
  void* x = env.alloc->allocate(4096, env.side);
  env.alloc->record_stream(x, env.cap);
  void* cached = env.alloc->allocate(3 * MiB, env.side);
  env.alloc->deallocate(cached);
  env.begin();
  env.sim->reset_counters();
  env.alloc->record_stream(x, env.side);  // own stream: no effect
  env.alloc->deallocate(x);               // has a stream use: deferred
  void* p = env.alloc->allocate(4096, env.cap);    // new pool segment: relaxed malloc
  void* q = env.alloc->allocate(4096, env.side);   // default pool, no event processing
  EXPECT_NE(q, x) << "a deferred block is not reusable";
  env.alloc->empty_cache();                        // skipped: capture underway
  EXPECT_EQ(env.calls(driver_call::event_query), 0u);
  EXPECT_EQ(env.calls(driver_call::event_synchronize), 0u);
  EXPECT_EQ(env.calls(driver_call::event_record), 0u);
  EXPECT_EQ(env.calls(driver_call::free), 0u);
  EXPECT_EQ(env.calls(driver_call::malloc), 1u) << "the pool's segment (relaxed: legal in capture)";
  EXPECT_EQ(env.stats().num_sync_all_streams, 0);
  EXPECT_EQ(env.segments().size(), 3u);
  env.end();
  // First allocation after the capture: the deferred free records an event for `cap` (a use
  // from before the capture) and waits for it.
  void* r = env.alloc->allocate(4096, env.side);
  EXPECT_NE(r, x);
  EXPECT_EQ(env.calls(driver_call::event_record), 1u);
  EXPECT_EQ(env.native().pending_events(0), 1u);
  env.sim->complete(env.cap);
  void* t = env.alloc->allocate(4096, env.side);
  EXPECT_EQ(t, x);
  for (void* ptr : {p, q, r, t}) env.alloc->deallocate(ptr);
}

TEST(native_capture, StreamUsesRecordedDuringCaptureAreDropped) {
  capture_env env;
  void* x = env.alloc->allocate(4096, env.side);
  env.begin();
  env.alloc->record_stream(x, env.cap);  // a capture-time use
  env.alloc->deallocate(x);              // deferred
  EXPECT_EQ(env.segments()[0].blocks[0].state, block_state::active_pending_free);
  env.end();
  env.sim->reset_counters();
  void* y = env.alloc->allocate(4096, env.side);
  EXPECT_EQ(y, x) << "the capture-time use was dropped: reusable at once";
  EXPECT_EQ(env.calls(driver_call::event_record), 0u);
  env.alloc->deallocate(y);
}

// Note [Uses recorded again after a capture]: the same stream recorded during one capture and again
// after it is a real use; a free during a later capture keeps it (PyTorch would drop it).
TEST(native_capture, AStreamRecordedAgainAfterTheCaptureIsWaitedFor) {
  capture_env env;
  const stream_t other = env.new_stream();
  void* x = env.alloc->allocate(4096, env.side);
  env.begin();
  env.alloc->record_stream(x, other);  // a capture-time use
  env.end();
  env.alloc->record_stream(x, other);  // the same stream, for real work after the capture
  env.begin();
  env.alloc->deallocate(x);  // deferred
  env.end();
  env.sim->reset_counters();
  void* y = env.alloc->allocate(4096, env.side);
  EXPECT_NE(y, x) << "other's use after the capture is not done: x waits for its event";
  EXPECT_EQ(env.calls(driver_call::event_record), 1u) << "the event on other, recorded at the deferred free";
  env.sim->complete(other);
  env.alloc->deallocate(y);
  void* z = env.alloc->allocate(4096, env.side);
  EXPECT_TRUE(z == x || z == y) << "after other's work x is free again";
  env.alloc->deallocate(z);
}

// Note [record_stream across devices]: the stream's device is not looked up while a capture is
// underway (the lookup invalidated a real capture on the H200); the use is still recorded, and
// dropped at the end of the capture as any capture-time use.
TEST(native_capture, RecordStreamDuringCaptureMakesNoDeviceLookup) {
  capture_env env;
  void* x = env.alloc->allocate(4096, env.side);
  env.begin();
  env.sim->reset_counters();
  env.alloc->record_stream(x, env.cap);
  EXPECT_EQ(env.calls(driver_call::stream_get_device), 0u) << "no cudaStreamGetDevice during a capture";
  env.alloc->deallocate(x);
  EXPECT_EQ(env.segments()[0].blocks[0].state, block_state::active_pending_free) << "the use was recorded";
  env.end();
  void* y = env.alloc->allocate(4096, env.side);
  env.alloc->record_stream(y, env.cap);
  EXPECT_EQ(env.calls(driver_call::stream_get_device), 1u) << "outside a capture the check is made again";
  env.alloc->deallocate(y);
}

TEST(native_capture, EmptyCacheHandlesDeferredFrees) {
  capture_env env;
  void* x = env.alloc->allocate(4096, env.side);
  env.alloc->record_stream(x, env.cap);
  env.begin();
  env.alloc->deallocate(x);
  env.end();
  env.alloc->empty_cache();  // deferred → event → synchronised → segment released
  const memory_stats s = env.stats();
  EXPECT_EQ(s.active[all].current, 0);
  EXPECT_EQ(s.reserved_bytes[all].current, 0);
}

TEST(native_capture, OomDuringCaptureIsCleanAndReleasesNothing) {
  sim_options o;
  o.capacity = 64 * MiB;
  native_env env("", o);
  const stream_t cap = env.new_stream();
  void* cached = env.alloc->allocate(40 * MiB, cap);
  env.alloc->deallocate(cached);
  const mempool_id pool = allocator::create_pool_id();
  env.alloc->begin_allocate_to_pool(pool, only(cap));
  env.sim->set_capture(cap, capture_status::active, 3);
  try {
    (void)env.alloc->allocate(30 * MiB, cap);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  EXPECT_EQ(env.calls(driver_call::free), 0u);
  EXPECT_EQ(env.stats().num_alloc_retries, 0) << "release-all is skipped during capture";
  env.sim->set_capture(cap, capture_status::none, 0);
  env.alloc->end_allocate_to_pool(pool);
  void* p = env.alloc->allocate(30 * MiB, cap);  // default pool again: reuses the cached block
  EXPECT_EQ(p, cached);
  env.alloc->deallocate(p);
}

// Note [OOM during capture]: the message names the capture and the pool and says the capture is
// still usable; a real capture sequence on the sim (invalidated by any illegal call) proves it.
TEST(native_capture, OomDuringCaptureSaysSoAndTheCaptureStaysUsable) {
  sim_options o;
  o.capacity = 64 * MiB;
  native_env env("", o);
  const stream_t cap = env.new_stream();
  const mempool_id pool = allocator::create_pool_id();
  env.alloc->deallocate(env.alloc->allocate(40 * MiB, cap));  // cached in the default pool
  ASSERT_TRUE(env.sim->stream_begin_capture(cap, capture_mode::global).ok());
  env.alloc->begin_allocate_to_pool(pool, only(cap));
  std::string message;
  try {
    (void)env.alloc->allocate(30 * MiB, cap);
    ADD_FAILURE() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    message = e.what();
  }
  const std::string pool_text = "private pool {0, " + std::to_string(pool.second) + "}";
  EXPECT_NE(message.find("CUDA out of memory"), std::string::npos) << message;
  EXPECT_NE(message.find("during a CUDA graph capture"), std::string::npos) << message;
  EXPECT_NE(message.find(pool_text), std::string::npos) << message;
  EXPECT_NE(message.find("The capture is still usable"), std::string::npos) << message;
  std::cout << "[ message  ] " << message << "\n";

  capture_info info;
  ASSERT_TRUE(env.sim->stream_capture_info(cap, &info).ok());
  EXPECT_EQ(info.status, capture_status::active) << "the failed allocation invalidated the capture";
  void* small_block = env.alloc->allocate(4 * MiB, cap);  // the capture goes on in the pool
  for (const segment_info& seg : env.segments()) {
    if (seg.address <= addr(small_block) && addr(small_block) < seg.address + seg.total_size) {
      EXPECT_EQ(seg.pool, pool) << "the allocation after the OOM went to the capture's pool";
    }
  }
  env.alloc->end_allocate_to_pool(pool);
  graph_t graph = nullptr;
  ASSERT_TRUE(env.sim->stream_end_capture(cap, &graph).ok()) << "the capture could not be ended";
  EXPECT_NE(graph, nullptr);
  EXPECT_TRUE(env.sim->graph_destroy(graph).ok());
  env.alloc->deallocate(small_block);
  env.alloc->release_pool(pool);
  env.alloc->empty_cache();
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
}

TEST(native_capture, OomOutsideThePoolDuringACaptureSaysWhyNothingWasReleased) {
  sim_options o;
  o.capacity = 64 * MiB;
  native_env env("", o);
  const stream_t cap = env.new_stream();
  const stream_t other = env.new_stream();
  env.alloc->deallocate(env.alloc->allocate(40 * MiB, cap));  // cached on cap, not usable by other
  const mempool_id pool = allocator::create_pool_id();
  env.alloc->begin_allocate_to_pool(pool, only(cap));
  env.sim->set_capture(cap, capture_status::active, 9);
  std::string message;
  try {
    (void)env.alloc->allocate(30 * MiB, other);  // default pool: not routed
    ADD_FAILURE() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("A CUDA graph capture is underway on device 0"), std::string::npos) << message;
  EXPECT_EQ(message.find("private pool"), std::string::npos) << message;
  env.sim->set_capture(cap, capture_status::none, 0);
  env.alloc->end_allocate_to_pool(pool);
  void* p = env.alloc->allocate(30 * MiB, other);  // after the capture: release-all frees cap's block
  EXPECT_NE(p, nullptr);
  env.alloc->deallocate(p);
  env.alloc->release_pool(pool);
}

TEST(native_capture, SideStreamJoinedToCaptureSharesThePool) {
  native_env env;
  const stream_t cap = env.new_stream();
  const stream_t joined = env.new_stream();
  const mempool_id pool = allocator::create_pool_id();
  env.alloc->begin_allocate_to_pool(pool, [&](stream_t s) { return s == cap || s == joined; });
  void* a = env.alloc->allocate(4096, cap);
  void* b = env.alloc->allocate(4096, joined);
  env.alloc->end_allocate_to_pool(pool);
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 2u) << "two new segments (one per stream)";
  EXPECT_EQ(segs[0].pool, pool);
  EXPECT_EQ(segs[1].pool, pool);
  env.alloc->deallocate(a);
  env.alloc->deallocate(b);
}

TEST(native_capture, RepeatedCapturesDoNotGrowMemory) {
  native_env env;
  const stream_t cap = env.new_stream();
  for (int i = 0; i < 100; ++i) {
    const mempool_id pool = allocator::create_pool_id();
    env.alloc->begin_allocate_to_pool(pool, only(cap));
    void* p = env.alloc->allocate(8 * MiB, cap);
    env.alloc->deallocate(p);
    env.alloc->end_allocate_to_pool(pool);
    env.alloc->release_pool(pool);
    env.alloc->empty_cache();
  }
  EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
  EXPECT_EQ(env.stats().segment[all].allocated, 100);
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
}

}  // namespace
}  // namespace streampool::test
