// tests/unit/config/warnings_test.cpp — non-fatal findings stored in allocator_config::warnings.
//
// Keys the chosen backend ignores (docs/pytorch-compatibility.md §1.3), async_pool under backend:native, and an inert
// garbage_collection_threshold (docs/pytorch-compatibility.md §2.11). All decided after the whole string is parsed.
#include "config_test_support.hpp"

namespace streampool::test {
namespace {

TEST(config_warnings, PlainNativeConfigHasNone) {
  const allocator_config config = parse_config(
      "backend:native,max_split_size_mb:128,roundup_power2_divisions:4,expandable_segments:True,"
      "per_process_memory_fraction:0.9,garbage_collection_threshold:0.8");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
}

TEST(config_warnings, HonouredPyTorchKeysDoNotWarn) {
  const allocator_config config =
      parse_config("graph_capture_record_stream_reuse:True,release_lock_on_cudamalloc:True");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
  EXPECT_TRUE(config.graph_capture_record_stream_reuse);
  EXPECT_TRUE(config.release_lock_on_cudamalloc);
}

TEST(config_warnings, AsyncBackendIgnoresNativeKeys) {
  const allocator_config config = parse_config("backend:cudaMallocAsync,max_split_size_mb:64");
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(config.warnings[0], "backend:cudaMallocAsync ignores max_split_size_mb:64"));
  EXPECT_TRUE(contains(config.warnings[0], "backend:native"));
  // The value is still validated and stored.
  EXPECT_EQ(config.max_split_size, 64 * mib);
  EXPECT_THROW((void)parse_config("backend:cudaMallocAsync,max_split_size_mb:2"), config_error);
}

TEST(config_warnings, BackendIgnoresIsOrderIndependent) {
  const allocator_config before = parse_config("max_split_size_mb:64,backend:cudaMallocAsync");
  const allocator_config after = parse_config("backend:cudaMallocAsync,max_split_size_mb:64");
  ASSERT_EQ(before.warnings.size(), 1u);
  EXPECT_EQ(before.warnings, after.warnings);
  // A later backend key naming the other backend is an error, as in PyTorch (Note [A second
  // backend key]); repeating the same one changes nothing.
  EXPECT_THROW((void)parse_config("backend:cudaMallocAsync,max_split_size_mb:64,backend:native"), config_error);
  EXPECT_EQ(parse_config("backend:cudaMallocAsync,max_split_size_mb:64,backend:cudaMallocAsync").warnings,
            after.warnings);
}

TEST(config_warnings, EveryNativeOnlyKeyIsNamed) {
  const allocator_config config = parse_config(
      "backend:cudaMallocAsync,max_split_size_mb:64,max_non_split_rounding_mb:32,"
      "roundup_power2_divisions:[256:1,>:2],roundup_bypass_threshold_mb:512,"
      "garbage_collection_threshold:0.5,expandable_segments:True,release_lock_on_cudamalloc:True,"
      "large_segment_size_mb:32,expandable_segments_reserve:4G");
  ASSERT_EQ(config.warnings.size(), 1u);
  for (const std::string_view part :
       {"max_split_size_mb:64", "max_non_split_rounding_mb:32", "roundup_power2_divisions:[",
        "roundup_bypass_threshold_mb:512", "garbage_collection_threshold:0.5", "expandable_segments:True",
        "release_lock_on_cudamalloc:True", "large_segment_size_mb:32", "expandable_segments_reserve:4G"}) {
    EXPECT_TRUE(contains(config.warnings[0], part)) << part;
  }
}

TEST(config_warnings, KeysBothBackendsUseDoNotWarn) {
  const allocator_config config = parse_config(
      "backend:cudaMallocAsync,per_process_memory_fraction:0.5,async_pool:dedicated");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
}

TEST(config_warnings, AsyncPoolUnderNativeBackend) {
  const allocator_config config = parse_config("async_pool:dedicated");
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(config.warnings[0], "backend:native ignores async_pool:dedicated"));
  EXPECT_EQ(parse_config("async_pool:dedicated,backend:cudaMallocAsync").warnings.size(), 0u);
}

TEST(config_warnings, GarbageCollectionIsInertWithoutAFraction) {
  const allocator_config config = parse_config("garbage_collection_threshold:0.6");
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(config.warnings[0], "garbage_collection_threshold:0.6 has no effect"));
  EXPECT_TRUE(contains(config.warnings[0], "per_process_memory_fraction is 1.0"));
  EXPECT_TRUE(contains(config.warnings[0], "memory fraction cap"));
  // Written explicitly as 1: same.
  EXPECT_EQ(parse_config("per_process_memory_fraction:1,garbage_collection_threshold:0.6")
                .warnings.size(),
            1u);
  // A fraction below 1, before or after the threshold: no warning.
  EXPECT_TRUE(parse_config("garbage_collection_threshold:0.6,per_process_memory_fraction:0.8")
                  .warnings.empty());
  EXPECT_TRUE(parse_config("per_process_memory_fraction:0.8,garbage_collection_threshold:0.6")
                  .warnings.empty());
}

TEST(config_warnings, InertGarbageCollectionUnderAsyncIsReportedOnceAsIgnored) {
  const allocator_config config =
      parse_config("backend:cudaMallocAsync,garbage_collection_threshold:0.6");
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(config.warnings[0], "ignores garbage_collection_threshold:0.6"));
}

TEST(config_warnings, WarningsComeInAFixedOrder) {
  const allocator_config config = parse_config(
      "pinned_num_register_threads:4,async_pool:dedicated,garbage_collection_threshold:0.5");
  // pinned_num_register_threads is used (by the pinned host allocator): no warning for it.
  ASSERT_EQ(config.warnings.size(), 2u);
  EXPECT_TRUE(contains(config.warnings[0], "async_pool"));
  EXPECT_TRUE(contains(config.warnings[1], "garbage_collection_threshold"));
}

}  // namespace
}  // namespace streampool::test
