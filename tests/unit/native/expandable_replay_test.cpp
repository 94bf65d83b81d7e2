// Replay of the trace encoder_varlen (tests/data: 82,319 events of a PyTorch training run) on the
// sim driver with expandable_segments:True: peak reserved / peak allocated must be <= 1.02
// (PyTorch with expandable segments: 1.017, tests/data/README.md); the default config is replayed
// too for comparison.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "streampool/replay.hpp"
#include "unit/native/expandable_test_support.hpp"

namespace streampool::test {
namespace {

const std::string trace_path = std::string(STREAMPOOL_TEST_DATA_DIR) + "/encoder_varlen.trace.csv.gz";

replay_result replay(const std::vector<trace_event>& events, const std::string& conf) {
  sim_options o;
  o.capacity = 141 * GiB;  // an H200
  native_env env(conf, o);
  replay_options options;
  options.sim = env.sim.get();
  const replay_result r = replay_trace(*env.alloc, events, options);
  // Everything was freed at the end of the replay: empty_cache returns every page.
  env.alloc->empty_cache();
  EXPECT_EQ(env.sim->bytes_in_use(0), 0u) << conf;
  return r;
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(MiB); }

TEST(expandable_replay, EncoderVarlenFragmentationMatchesPyTorch) {
  const std::vector<trace_event> events = read_trace(trace_path);  // in the repository: never skipped
  const replay_result normal = replay(events, "");
  const replay_result expandable = replay(events, "expandable_segments:True");
  const double normal_ratio = static_cast<double>(normal.peak_reserved) / static_cast<double>(normal.peak_allocated);
  const double ratio = static_cast<double>(expandable.peak_reserved) / static_cast<double>(expandable.peak_allocated);
  std::printf("encoder_varlen on the sim driver (141 GiB):\n"
              "  default:                  peak allocated %.1f MiB, peak reserved %.1f MiB, ratio %.3f, %lld device allocs\n"
              "  expandable_segments:True: peak allocated %.1f MiB, peak reserved %.1f MiB, ratio %.3f, %lld maps\n",
              mib(normal.peak_allocated), mib(normal.peak_reserved), normal_ratio,
              static_cast<long long>(normal.device_mallocs), mib(expandable.peak_allocated),
              mib(expandable.peak_reserved), ratio, static_cast<long long>(expandable.device_mallocs));
  EXPECT_EQ(expandable.peak_requested, normal.peak_requested);
  EXPECT_LE(ratio, 1.02) << "PyTorch with expandable segments: 1.017";
  EXPECT_LT(expandable.peak_reserved, normal.peak_reserved / 2) << "PyTorch: 11316 vs 24750 MiB";
  EXPECT_EQ(expandable.peak_reserved % (2 * MiB), 0u) << "whole pages";
}

}  // namespace
}  // namespace streampool::test
