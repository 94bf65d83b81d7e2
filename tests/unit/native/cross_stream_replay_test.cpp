// cross_stream_replay_test.cpp — the multi-stream training traces of tests/data/traces replayed on
// the sim driver with expandable_segments:True,cross_stream_reuse:True: peak reserved must be what
// the same replay reached on an H200 (docs/benchmarks.md, "Cross-stream reuse: peak reserved over peak requested"; the
// policy's placement depends only on the sequence of calls, so the sim predicts it to the MiB), far
// below PyTorch's best config for these traces, and the replay's policy counters must be the
// allocator's own statistics over the replay.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "streampool/replay.hpp"
#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

struct policy_case {
  const char* trace;
  std::size_t h200_peak_reserved_mib;   ///< streampool's replay on the H200
  std::size_t pytorch_expandable_mib;   ///< PyTorch's expandable_segments:True on the same trace
};

class cross_stream_replay : public ::testing::TestWithParam<policy_case> {};

TEST_P(cross_stream_replay, PeakReservedIsTheDevicesAndTheCountersAreTheStatistics) {
  const policy_case& c = GetParam();
  const std::vector<trace_event> events =
      read_trace(std::string(STREAMPOOL_TEST_DATA_DIR) + "/traces/" + c.trace + ".trace.csv.gz");
  sim_options o;
  o.capacity = 141 * GiB;  // an H200
  native_env env("expandable_segments:True,cross_stream_reuse:True", o);
  replay_options options;
  options.sim = env.sim.get();
  const memory_stats before = env.stats();
  const replay_result r = replay_trace(*env.alloc, events, options);
  const memory_stats after = env.stats();

  EXPECT_EQ(r.peak_reserved, c.h200_peak_reserved_mib * MiB) << c.trace;
  EXPECT_LT(r.peak_reserved, c.pytorch_expandable_mib * MiB) << c.trace;
  EXPECT_GT(r.cross_stream_reuses, 0) << "blocks freed on one stream served another";
  EXPECT_GT(r.moved_pages, 0) << "free pages moved instead of raising reserved memory";
  EXPECT_EQ(r.cross_stream_reuses, after.num_cross_stream_reuses - before.num_cross_stream_reuses);
  EXPECT_EQ(r.cross_stream_waits, after.num_cross_stream_waits - before.num_cross_stream_waits);
  EXPECT_EQ(r.moved_pages, after.num_moved_pages - before.num_moved_pages);
  EXPECT_EQ(r.fence_host_waits, after.num_fence_host_waits - before.num_fence_host_waits);
  EXPECT_EQ(after.allocated_bytes[all].current, 0) << "the replay freed everything";
}

INSTANTIATE_TEST_SUITE_P(recorded, cross_stream_replay,
                         ::testing::Values(policy_case{"twostream_cnn", 1212, 1324},
                                           policy_case{"threestream_enc", 3960, 4212}),
                         [](const ::testing::TestParamInfo<policy_case>& c) {
                           return std::string(c.param.trace);
                         });

}  // namespace
}  // namespace streampool::test
