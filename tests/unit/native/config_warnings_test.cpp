// Config keys the native backend reads at construction: per_process_memory_fraction, and the
// keys it does not implement yet, which fall back with one warning each (expandable segments
// are implemented; their fallback without VMM is tested in expandable_oom_test.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/warnings_scope.hpp"
#include "unit/native/native_test_support.hpp"

namespace streampool::test {
namespace {

using streampool::testing::warnings_scope;

TEST(config_warnings, ExpandableSegmentsAreImplemented) {
  warnings_scope w;
  native_env env("expandable_segments:True");
  void* p = env.alloc->allocate(100);
  EXPECT_TRUE(w.messages().empty()) << "the sim device has VMM: no fallback, no warning";
  const auto segs = env.segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_TRUE(segs[0].is_expandable);
  EXPECT_EQ(segs[0].total_size, 2 * MiB) << "one small page mapped";
  env.alloc->deallocate(p);
}

TEST(config_warnings, GraphCaptureRecordStreamReuseIsHonouredWithoutAWarning) {
  // Honoured by the native backend (Note [Reuse within a capture]): neither the config nor the
  // backend warns.
  const allocator_config config = parse_config("graph_capture_record_stream_reuse:True");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
  warnings_scope w;
  native_env env("graph_capture_record_stream_reuse:True");
  EXPECT_TRUE(w.messages().empty()) << w.messages().front();
}

TEST(config_warnings, DefaultsWarnNothing) {
  warnings_scope w;
  native_env env;
  EXPECT_TRUE(w.messages().empty());
}

TEST(config_warnings, FractionKeyAppliesToEveryDevice) {
  sim_options o;
  o.device_count = 2;
  o.capacity = 100 * MiB;
  native_env env("per_process_memory_fraction:0.25", o);
  EXPECT_DOUBLE_EQ(env.alloc->memory_fraction(0), 0.25);
  EXPECT_DOUBLE_EQ(env.alloc->memory_fraction(1), 0.25);
  EXPECT_THROW((void)env.alloc->allocate(26 * MiB, nullptr, 1), out_of_memory);
  void* p = env.alloc->allocate(24 * MiB, nullptr, 1);
  env.alloc->deallocate(p);
}

}  // namespace
}  // namespace streampool::test
