// pool_sleep_fault_test.cpp — sleep and wake under every driver failure the sim can inject (Note
// [Sleep all or nothing] in src/native/pool_sleep.cpp): whichever call fails, at whichever
// point, the pool ends asleep or awake, never half; an offloaded pool loses no byte; nothing leaks
// (device memory, pinned host memory, reservations). And the ordering rules of Note [Sleep after
// queued work], seen by the sim's hazard checker.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "native_test_support.hpp"
#include "streampool/errors.hpp"

namespace streampool::test {
namespace {

constexpr std::size_t big_bytes = MiB + 512;  // the large pool (one 20 MiB page), kept small for the sanitizers
constexpr std::size_t small_bytes = 3000;

struct sleeping_pool {
  native_env env;
  stream_t stream = nullptr;
  mempool_id pool = allocator::create_pool_id();
  std::vector<void*> live;

  std::size_t extra_bytes = 0;  ///< a fourth allocation of this size when not 0 (several pages)

  explicit sleeping_pool(std::string_view conf = "", sim_options options = {}, std::size_t extra = 0)
      : env(conf, options), extra_bytes(extra) {
    stream = env.new_stream();
    const stream_t s = stream;
    env.alloc->begin_allocate_to_pool(pool, [s](stream_t x) { return x == s; });
    pool_options o;
    o.sleepable = true;
    o.page_bytes = 20 * MiB;  // the sweep's page counts (a sleepable pool's default page is 64 MiB)
    env.alloc->set_pool_options(pool, o);
    live.push_back(env.alloc->allocate(big_bytes, stream));
    live.push_back(env.alloc->allocate(small_bytes, stream));
    live.push_back(env.alloc->allocate(2 * MiB, stream));
    if (extra_bytes != 0) live.push_back(env.alloc->allocate(extra_bytes, stream));
    env.alloc->end_allocate_to_pool(pool);
    for (std::size_t i = 0; i < live.size(); ++i) fill(i);
  }
  [[nodiscard]] std::size_t size(std::size_t i) const {
    return i == 0 ? big_bytes : i == 1 ? small_bytes : i == 2 ? 2 * MiB : extra_bytes;
  }
  // The extra allocation holds one byte value (a run of the sim's contents model, so that its
  // size costs the sanitizers nothing); the others a pattern that changes every 4 KiB.
  static constexpr std::uint8_t extra_value = 0x5A;
  void fill(std::size_t i) {
    if (i == 3) {
      ASSERT_TRUE(env.sim->memset_async(0, live[i], extra_value, extra_bytes, stream).ok());
      return;
    }
    std::vector<std::uint8_t> bytes(size(i));
    for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<std::uint8_t>(i * 31 + k / 4096);
    env.sim->write_bytes(live[i], bytes.data(), bytes.size());
  }
  [[nodiscard]] bool intact() const {
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (i == 3) {
        byte_check found;
        if (!env.sim->check_bytes(0, live[i], extra_bytes, extra_value, stream, &found).ok() || found.mismatches != 0) {
          return false;
        }
        continue;
      }
      const std::vector<std::uint8_t> got = env.sim->read_bytes(live[i], size(i));
      for (std::size_t k = 0; k < got.size(); ++k) {
        if (got[k] != static_cast<std::uint8_t>(i * 31 + k / 4096)) return false;
      }
    }
    return true;
  }
  [[nodiscard]] pool_sleep_state state() const { return env.alloc->pools().sleep_state(pool); }
  /// Frees everything and checks that nothing is left on the device or pinned on the host.
  void finish() {
    if (state().asleep) env.alloc->pools().wake(pool);
    for (void* p : live) env.alloc->deallocate(p);
    env.alloc->release_pool(pool);
    env.alloc->empty_cache();
    EXPECT_EQ(env.stats().reserved_bytes[all].current, 0);
    EXPECT_EQ(env.sim->bytes_in_use(0), 0u);
    env.alloc.reset();
    EXPECT_EQ(env.sim->host_bytes_pinned(), 0u);
  }
};

const std::vector<driver_call> sleep_calls = {
    driver_call::stream_create, driver_call::stream_synchronize, driver_call::host_alloc, driver_call::memcpy_async,
    driver_call::vmm_unmap,     driver_call::vmm_release,        driver_call::vmm_create, driver_call::vmm_map,
    driver_call::vmm_set_access, driver_call::event_synchronize,
};

TEST(pool_sleep_faults, EveryFailedCallOfSleepLeavesThePoolWholeAndLosesNoByte) {
  for (const driver_call call : sleep_calls) {
    for (int skip = 0; skip < 6; ++skip) {
      SCOPED_TRACE(std::string(to_string(call)) + " failing after " + std::to_string(skip) + " good calls");
      sleeping_pool p;
      const std::int64_t reserved = p.env.stats().reserved_bytes[all].current;
      p.env.sim->fail_next(call, 1, call == driver_call::host_alloc || call == driver_call::vmm_create
                                        ? status::out_of_memory : status::other, skip);
      bool threw = false;
      try {
        p.env.alloc->pools().sleep(p.pool);
      } catch (const std::exception& e) {
        threw = true;
        EXPECT_NE(std::string(e.what()).find("streampool"), std::string::npos) << e.what();
      }
      p.env.sim->clear_faults();
      const pool_sleep_state s = p.state();
      if (threw && !s.asleep) {
        EXPECT_EQ(p.env.stats().reserved_bytes[all].current, reserved) << "awake as before";
        EXPECT_TRUE(p.intact());
      } else {
        EXPECT_TRUE(s.asleep);
        p.env.alloc->pools().wake(p.pool);
        EXPECT_TRUE(p.intact());
        EXPECT_EQ(p.env.stats().reserved_bytes[all].current, reserved);
      }
      p.finish();
    }
  }
}

TEST(pool_sleep_faults, EveryFailedCallOfWakeKeepsThePoolAsleepWithItsBytes) {
  for (const driver_call call : sleep_calls) {
    for (int skip = 0; skip < 6; ++skip) {
      SCOPED_TRACE(std::string(to_string(call)) + " failing after " + std::to_string(skip) + " good calls");
      sleeping_pool p;
      const std::int64_t reserved = p.env.stats().reserved_bytes[all].current;
      p.env.alloc->pools().sleep(p.pool);
      p.env.sim->fail_next(call, 1, call == driver_call::vmm_create ? status::out_of_memory : status::other, skip);
      bool threw = false;
      try {
        p.env.alloc->pools().wake(p.pool);
      } catch (const std::exception& e) {
        threw = true;
        EXPECT_NE(std::string(e.what()).find("wake"), std::string::npos) << e.what();
      }
      p.env.sim->clear_faults();
      if (threw) {
        EXPECT_TRUE(p.state().asleep) << "a failed wake leaves the pool asleep";
        EXPECT_EQ(p.env.sim->bytes_in_use(0), 0u) << "what the failed wake mapped went back";
        p.env.alloc->pools().wake(p.pool);
      }
      EXPECT_FALSE(p.state().asleep);
      EXPECT_TRUE(p.intact());
      EXPECT_EQ(p.env.stats().reserved_bytes[all].current, reserved);
      p.finish();
    }
  }
}

TEST(pool_sleep_faults, AWakeWithoutRoomSaysSoAndSucceedsOnceThereIsRoom) {
  sim_options small_device;
  small_device.capacity = 64 * MiB;
  sleeping_pool p("", small_device);
  p.env.alloc->pools().sleep(p.pool);
  void* other = p.env.alloc->allocate(56 * MiB, p.env.new_stream());  // takes the room back
  try {
    p.env.alloc->pools().wake(p.pool);
    ADD_FAILURE() << "woke without room";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("call wake() again"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(p.state().asleep);
  p.env.alloc->deallocate(other);
  p.env.alloc->empty_cache();
  p.env.alloc->pools().wake(p.pool);
  EXPECT_TRUE(p.intact());
  p.finish();
}

// Note [Sleep pipeline]: with one page per window, a pool of several pages sleeps and wakes window by
// window; a call failing at any point of the pipeline still leaves the pool whole, and no page is
// unmapped while a copy of it is queued (the hazard checker sees it with the sim not eager).
constexpr std::size_t pipelined_bytes = 41 * MiB;  // three 20 MiB pages with the others
const sleep_options one_page_windows = [] {
  sleep_options o;
  o.pipeline_bytes = 1;
  return o;
}();
const std::vector<driver_call> pipeline_calls = {
    driver_call::memcpy_async, driver_call::event_record, driver_call::event_synchronize, driver_call::event_create,
    driver_call::stream_synchronize, driver_call::vmm_unmap, driver_call::vmm_create, driver_call::vmm_map,
};

TEST(pool_sleep_pipeline, FailuresAtEveryWindowLeaveThePoolWholeAndLoseNoByte) {
  for (const driver_call call : pipeline_calls) {
    for (int skip = 0; skip < 5; ++skip) {
      SCOPED_TRACE(std::string(to_string(call)) + " failing after " + std::to_string(skip) + " good calls");
      sleeping_pool p("", {}, pipelined_bytes);
      const std::int64_t reserved = p.env.stats().reserved_bytes[all].current;
      p.env.sim->fail_next(call, 1, call == driver_call::vmm_create ? status::out_of_memory : status::other, skip);
      bool threw = false;
      try {
        p.env.alloc->pools().sleep(p.pool, one_page_windows);
      } catch (const std::exception& e) {
        threw = true;
        EXPECT_NE(std::string(e.what()).find("streampool"), std::string::npos) << e.what();
      }
      if (!threw) {  // asleep: the same fault, once more, for wake
        EXPECT_TRUE(p.state().asleep);
        EXPECT_EQ(p.env.sim->bytes_in_use(0), 0u) << "every page went";
        p.env.sim->fail_next(call, 1, call == driver_call::vmm_create ? status::out_of_memory : status::other, skip);
        try {
          p.env.alloc->pools().wake(p.pool);
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("wake"), std::string::npos) << e.what();
          EXPECT_TRUE(p.state().asleep) << "a failed wake leaves the pool asleep";
          EXPECT_EQ(p.env.sim->bytes_in_use(0), 0u) << "what the failed wake mapped went back";
        }
      }
      p.env.sim->clear_faults();
      if (p.state().asleep) p.env.alloc->pools().wake(p.pool);
      EXPECT_TRUE(p.intact());
      EXPECT_EQ(p.env.stats().reserved_bytes[all].current, reserved);
      EXPECT_EQ(p.env.sim->hazard_violations(), 0u);
      p.finish();
    }
  }
}

TEST(pool_sleep_pipeline, NoPageGoesWhileItsCopyIsQueued) {
  sleeping_pool p("", {}, pipelined_bytes);
  p.env.sim->set_eager(false);
  const std::size_t before = p.env.sim->calls(driver_call::event_synchronize);
  p.env.alloc->pools().sleep(p.pool, one_page_windows);
  EXPECT_EQ(p.env.sim->hazard_violations(), 0u) << p.env.sim->hazard_reports().front();
  EXPECT_GT(p.env.sim->calls(driver_call::event_synchronize), before) << "the unmapping waited window by window";
  EXPECT_EQ(p.env.sim->bytes_in_use(0), 0u);
  p.env.alloc->pools().wake(p.pool);
  EXPECT_TRUE(p.env.sim->use(p.stream, p.live[3], pipelined_bytes)) << "ordered after wake's copies";
  EXPECT_EQ(p.env.sim->hazard_violations(), 0u);
  p.env.sim->set_eager(true);
  EXPECT_TRUE(p.intact());
  p.finish();
}

TEST(pool_sleep_order, SleepWaitsForWorkStillQueuedOnThePoolsMemory) {
  sleeping_pool p;
  p.env.sim->set_eager(false);
  const stream_t other = p.env.new_stream();
  p.env.alloc->record_stream(p.live[0], other);
  EXPECT_TRUE(p.env.sim->use(p.stream, p.live[1], small_bytes));  // queued, not done
  EXPECT_TRUE(p.env.sim->use(other, p.live[0], 4096));
  p.env.alloc->pools().sleep(p.pool);
  EXPECT_EQ(p.env.sim->hazard_violations(), 0u) << p.env.sim->hazard_reports().front();
  p.env.alloc->pools().wake(p.pool);
  EXPECT_TRUE(p.env.sim->use(p.stream, p.live[0], big_bytes)) << "ordered after wake's copies";
  EXPECT_TRUE(p.env.sim->use(other, p.live[2], 2 * MiB));
  EXPECT_EQ(p.env.sim->hazard_violations(), 0u);
  p.env.sim->set_eager(true);
  EXPECT_TRUE(p.intact());
  p.finish();
}

TEST(pool_sleep_order, AFreeWithEventsBeforeSleepIsWaitedFor) {
  sleeping_pool p;
  p.env.sim->set_eager(false);
  const stream_t other = p.env.new_stream();
  p.env.alloc->record_stream(p.live[2], other);
  EXPECT_TRUE(p.env.sim->use(other, p.live[2], 2 * MiB));
  p.env.alloc->deallocate(p.live[2]);  // waits for an event on `other`
  p.live.pop_back();
  p.env.alloc->pools().sleep(p.pool);
  EXPECT_EQ(p.env.sim->hazard_violations(), 0u);
  p.env.alloc->pools().wake(p.pool);
  p.env.sim->set_eager(true);
  EXPECT_TRUE(p.intact());
  p.finish();
}

TEST(pool_sleep_stats, TheTraceAndTheCountersSayWhatWentBack) {
  sleeping_pool p;
  p.env.alloc->record_history(true, 1000);
  const memory_stats before = p.env.stats();
  p.env.alloc->pools().sleep(p.pool);
  const pool_sleep_state s = p.state();
  const memory_stats asleep = p.env.stats();
  EXPECT_EQ(asleep.reserved_bytes[all].current, before.reserved_bytes[all].current - static_cast<std::int64_t>(s.released_bytes));
  EXPECT_GT(asleep.num_device_free, before.num_device_free);
  EXPECT_EQ(asleep.allocated_bytes[all].current, before.allocated_bytes[all].current);
  std::size_t unmapped = 0;
  for (const trace_entry& e : p.env.alloc->trace()) {
    if (e.action == trace_action::segment_unmap && e.pool == p.pool) unmapped += e.size;
  }
  EXPECT_EQ(unmapped, s.released_bytes);
  p.env.alloc->pools().wake(p.pool);
  std::size_t mapped = 0;
  for (const trace_entry& e : p.env.alloc->trace()) {
    if (e.action == trace_action::segment_map && e.pool == p.pool) mapped += e.size;
  }
  EXPECT_GE(mapped, s.released_bytes);
  EXPECT_EQ(p.env.stats().reserved_bytes[all].current, before.reserved_bytes[all].current);
  p.finish();
}

TEST(pool_sleep_stats, TheSegmentListenerHearsWhatWentBackAndCameAgain) {
  // What issue 28's tracker (NCCL registration) is built on: without history, a listener hears the
  // unmaps of sleep and the maps of wake, byte for byte.
  sleeping_pool p;
  std::size_t unmapped = 0;
  std::size_t mapped = 0;
  p.env.alloc->set_segment_listener([&](const trace_entry& e) {
    if (e.pool != p.pool) return;
    if (e.action == trace_action::segment_unmap) unmapped += e.size;
    if (e.action == trace_action::segment_map) mapped += e.size;
  });
  p.env.alloc->pools().sleep(p.pool);
  const std::size_t released = p.state().released_bytes;
  EXPECT_GT(released, 0u);
  EXPECT_EQ(unmapped, released);
  EXPECT_EQ(mapped, 0u);
  p.env.alloc->pools().wake(p.pool);
  EXPECT_EQ(mapped, released);
  p.env.alloc->set_segment_listener(nullptr);
  p.finish();
}

TEST(pool_sleep_rules, APoolWithSleepableGetsVmmSegmentsWhateverTheConfigSays) {
  sleeping_pool p("expandable_segments:False");
  for (const segment_info& s : p.env.segments()) {
    if (s.pool == p.pool) {
      EXPECT_TRUE(s.is_expandable);
    }
  }
  p.finish();
}

TEST(pool_sleep_rules, CrossStreamReuseKeepsTheDefaultPoolAwake) {
  native_env env("expandable_segments:True,cross_stream_reuse:True");
  const stream_t s = env.new_stream();
  void* x = env.alloc->allocate(MiB, s);
  try {
    env.alloc->pools().sleep(mempool_id{});
    ADD_FAILURE() << "slept";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("cross_stream_reuse"), std::string::npos) << e.what();
  }
  env.alloc->deallocate(x);
}

TEST(pool_sleep_rules, AnAllocatorDestroyedWhileAPoolSleepsGivesEverythingBack) {
  sleeping_pool p;
  p.env.alloc->pools().sleep(p.pool);
  p.env.alloc.reset();
  EXPECT_EQ(p.env.sim->bytes_in_use(0), 0u);
  EXPECT_EQ(p.env.sim->host_bytes_pinned(), 0u);
}

}  // namespace
}  // namespace streampool::test
