// multi_stream_replay_test.cpp — replays of a two-stream trace (tests/data/two_stream.trace.csv:
// a side stream allocates inputs that the main stream uses after record_stream) through every
// config of the `tune` grid, on the sim driver and on the real one (skipped without a GPU). The
// replay's streams must outlive every use the allocator makes of them (Note [Replay stream
// lifetime], src/replay/trace_replay.cpp): on the sim driver a call given a destroyed stream is
// counted (Note [Sim destroyed streams]) and must never happen; on an H200 such a call failed with
// cudaErrorDeviceUninitialized ("invalid device context") before the fix.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streampool/replay.hpp"
#include "streampool/sim_driver.hpp"
#include "support/backend_fixture.hpp"

namespace streampool::testing {
namespace {

struct replay_case {
  std::string name;
  std::string config;
  bool real_device;
};
inline void PrintTo(const replay_case& c, std::ostream* os) { *os << c.name; }

/// The `tune` grid (perf/cmd_tune.cpp), plus the garbage-collection threshold.
std::vector<replay_case> replay_cases(bool real_device) {
  const std::vector<std::pair<std::string, std::string>> configs = {
      {"default", ""},
      {"expandable", "expandable_segments:True"},
      {"split128", "max_split_size_mb:128"},
      {"split256", "max_split_size_mb:256"},
      {"split512", "max_split_size_mb:512"},
      {"roundup4", "roundup_power2_divisions:4"},
      {"roundup8", "roundup_power2_divisions:8"},
      {"roundup_list", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"},
      {"split256_roundup8", "max_split_size_mb:256,roundup_power2_divisions:8"},
      {"gc_split256", "garbage_collection_threshold:0.6,max_split_size_mb:256"},
      {"expandable_split256", "expandable_segments:True,max_split_size_mb:256"},
      {"async", "backend:cudaMallocAsync"},
  };
  std::vector<replay_case> out;
  for (const auto& [name, config] : configs) {
    out.push_back({name + (real_device ? "_cuda" : "_sim"), config, real_device});
  }
  return out;
}

const std::vector<trace_event>& two_stream_trace() {
  static const std::vector<trace_event> events =
      read_trace(std::string(STREAMPOOL_TEST_DATA_DIR) + "/two_stream.trace.csv");
  return events;
}

class multi_stream_replay : public ::testing::TestWithParam<replay_case> {
 protected:
  void SetUp() override {
    if (GetParam().real_device) {
      driver_ = make_cuda_driver();
      const std::string reason = real_device_unavailable_reason(*driver_);
      if (!reason.empty()) GTEST_SKIP() << reason;
    } else {
      sim_options options;
      options.capacity = 16 * gib;
      options.eager_completion = false;
      auto sim = std::make_shared<sim_driver>(options);
      sim_ = sim.get();
      driver_ = sim;
    }
  }
  [[nodiscard]] std::unique_ptr<allocator> make() const {
    return make_allocator(parse_config(GetParam().config), driver_);
  }
  [[nodiscard]] replay_options options() const {
    replay_options o;
    o.sim = sim_;
    return o;
  }
  void expect_no_destroyed_stream_use() const {
    if (sim_ != nullptr) {
      EXPECT_EQ(sim_->destroyed_stream_uses(), 0u) << "a destroyed stream was used";
    }
  }

  std::shared_ptr<driver> driver_;
  sim_driver* sim_ = nullptr;
};

// The harness's order (perf/replay_run.cpp): the streams are made before the allocator, so the
// allocator is destroyed first, releasing its cache while the streams still exist.
TEST_P(multi_stream_replay, StreamsOwnedByTheCallerOutliveTheAllocator) {
  const std::vector<trace_event>& events = two_stream_trace();
  {
    std::optional<replay_streams> streams;
    std::unique_ptr<allocator> alloc = make();
    streams.emplace(*driver_, 0);
    replay_options o = options();
    o.streams = &*streams;
    const replay_result r = replay_trace(*alloc, events, o);
    EXPECT_EQ(r.replayed, 798u) << "399 allocations and 399 frees";
    EXPECT_EQ(r.skipped_frees, 0u);
    EXPECT_GT(r.peak_reserved, 0u);
    EXPECT_GE(r.peak_reserved, r.peak_allocated);
    if (sim_ != nullptr) {
      EXPECT_GE(streams->created(), 2u) << "the side stream, and holder streams for the delayed frees";
    } else {
      EXPECT_EQ(streams->created(), 1u) << "the side stream (delayed frees are deferred frees here)";
    }
    EXPECT_EQ(alloc->stats(0).allocated_bytes[0].current, 0) << "everything was freed";
    if (GetParam().config.find("cudaMallocAsync") == std::string::npos) {
      EXPECT_GT(alloc->stats(0).reserved_bytes[0].current, 0) << "the cache is kept: the caller owns the streams";
    }
    alloc->empty_cache();
    EXPECT_EQ(alloc->stats(0).reserved_bytes[0].current, 0);
    alloc->deallocate(alloc->allocate(3 * mib, streams->recorded(94000000001), 0));  // cached on the side stream
  }  // the allocator is destroyed (releasing the block cached on the side stream), then the streams
  expect_no_destroyed_stream_use();
  if (sim_ != nullptr) {
    EXPECT_EQ(sim_->bytes_in_use(0), 0u);
  }
}

// replay_trace with its own streams empties the cache before destroying them.
TEST_P(multi_stream_replay, StreamsOwnedByTheReplayAreReleasedFirst) {
  std::unique_ptr<allocator> alloc = make();
  const replay_result r = replay_trace(*alloc, two_stream_trace(), options());
  EXPECT_EQ(r.replayed, 798u);
  EXPECT_EQ(alloc->stats(0).reserved_bytes[0].current, 0) << "emptied before its streams were destroyed";
  alloc.reset();
  expect_no_destroyed_stream_use();
}

// The same replay twice through one allocator gives the same peaks (a second replay starts from
// the first one's cache only if the caller keeps it; here replay_trace emptied it).
TEST_P(multi_stream_replay, ReplayingTwiceGivesTheSamePeaks) {
  std::unique_ptr<allocator> alloc = make();
  const replay_result first = replay_trace(*alloc, two_stream_trace(), options());
  const replay_result second = replay_trace(*alloc, two_stream_trace(), options());
  EXPECT_EQ(first.peak_requested, second.peak_requested);
  EXPECT_EQ(first.peak_allocated, second.peak_allocated);
  EXPECT_EQ(first.peak_reserved, second.peak_reserved);
  alloc.reset();
  expect_no_destroyed_stream_use();
}

std::string replay_case_name(const ::testing::TestParamInfo<replay_case>& param_info) { return param_info.param.name; }

INSTANTIATE_TEST_SUITE_P(sim, multi_stream_replay, ::testing::ValuesIn(replay_cases(false)), replay_case_name);
INSTANTIATE_TEST_SUITE_P(cuda, multi_stream_replay, ::testing::ValuesIn(replay_cases(true)), replay_case_name);

// The bug the order above avoids, shown on the sim: streams destroyed while an expandable segment
// allocated on them is still cached. Releasing it synchronises the destroyed stream, which the sim
// now refuses as the real driver does (status::other, counted); the allocator recovers with a
// device synchronisation, so the memory is still returned.
TEST(multi_stream_replay_order, DestroyingTheStreamsFirstIsDetectedOnTheSim) {
  sim_options options;
  options.capacity = 16 * gib;
  options.eager_completion = false;
  auto sim = std::make_shared<sim_driver>(options);
  std::unique_ptr<allocator> alloc = make_allocator(parse_config("expandable_segments:True"), sim);
  {
    replay_streams streams(*sim, 0);
    replay_options o;
    o.sim = sim.get();
    o.streams = &streams;
    (void)replay_trace(*alloc, two_stream_trace(), o);
  }  // streams destroyed; the allocator still caches pages of segments on the side stream
  EXPECT_EQ(sim->destroyed_stream_uses(), 0u);
  EXPECT_NO_THROW(alloc->empty_cache());
  EXPECT_GE(sim->destroyed_stream_uses(), 1u) << "the sim must report the use of the destroyed side stream";
  EXPECT_EQ(alloc->stats(0).reserved_bytes[0].current, 0);
  alloc.reset();
  EXPECT_EQ(sim->bytes_in_use(0), 0u);
}

}  // namespace
}  // namespace streampool::testing
