// tests/unit/config/keys_test.cpp — valid and invalid values of every allocator key (docs/pytorch-compatibility.md §1.3).
//
// Each key: accepted values land in the right field with the right unit; rejected values name
// the key, the value, the valid range and the position. roundup_power2_divisions is in
// roundup_test.cpp, the pinned_* host keys and async_pool in host_keys_test.cpp.
#include "config_test_support.hpp"

namespace streampool::test {
namespace {

TEST(config_keys, Backend) {
  EXPECT_EQ(parse_config("backend:native").backend, backend_kind::native);
  EXPECT_EQ(parse_config("backend:cudaMallocAsync").backend, backend_kind::cuda_malloc_async);
  expect_config_error("backend:hipMallocAsync", "backend", 0,
                      {"backend:hipMallocAsync", "streampool is a CUDA library"});
  expect_config_error("backend:cudamallocasync", "backend", 0,
                      {"unknown value 'cudamallocasync'", "did you mean 'cudaMallocAsync'?",
                       "expected native or cudaMallocAsync"});
  expect_config_error("backend:pluggable", "backend", 0,
                      {"backend:pluggable", "expected native or cudaMallocAsync"});
}

TEST(config_keys, MaxSplitSizeExactMessage) {
  const std::optional<config_error> error = parse_error("max_split_size_mb:2");
  ASSERT_TRUE(error.has_value());
  EXPECT_STREQ(error->what(),
               "streampool config: max_split_size_mb:2 at position 0: value 2 is out of range; "
               "expected an integer >= 20 (MiB)");
}

TEST(config_keys, MaxSplitSize) {
  EXPECT_EQ(parse_config("max_split_size_mb:20").max_split_size, 20 * mib);  // newest bound: >= 20
  EXPECT_EQ(parse_config("max_split_size_mb:512").max_split_size, 512 * mib);
  expect_config_error("max_split_size_mb:19", "max_split_size_mb", 0, {"value 19 is out of range"});
  expect_config_error("max_split_size_mb:20abc", "max_split_size_mb", 0,
                      {"max_split_size_mb:20abc", "'20abc' is not an integer", ">= 20 (MiB)"});
  expect_config_error("max_split_size_mb:-5", "max_split_size_mb", 0, {"'-5' is negative"});
  expect_config_error("max_split_size_mb:1.5", "max_split_size_mb", 0, {"'1.5' is not an integer"});
  expect_config_error("max_split_size_mb:+64", "max_split_size_mb", 0, {"is not an integer"});
  expect_config_error("max_split_size_mb:0x40", "max_split_size_mb", 0, {"is not an integer"});
  expect_config_error("max_split_size_mb:99999999999999999999999", "max_split_size_mb", 0,
                      {"is too large"});
}

TEST(config_keys, MaxSplitSizeSaturatesToUnlimited) {
  const std::size_t largest_mb = allocator_config::unlimited / mib;
  EXPECT_EQ(parse_config("max_split_size_mb:" + std::to_string(largest_mb)).max_split_size,
            largest_mb * mib);
  EXPECT_EQ(parse_config("max_split_size_mb:" + std::to_string(largest_mb + 1)).max_split_size,
            allocator_config::unlimited);
}

TEST(config_keys, MaxNonSplitRounding) {
  EXPECT_EQ(parse_config("max_non_split_rounding_mb:20").max_non_split_rounding, 20 * mib);
  EXPECT_EQ(parse_config("max_non_split_rounding_mb:256").max_non_split_rounding, 256 * mib);
  expect_config_error("max_non_split_rounding_mb:10", "max_non_split_rounding_mb", 0,
                      {"max_non_split_rounding_mb:10", "value 10 is out of range", ">= 20 (MiB)"});
  expect_config_error("max_non_split_rounding_mb:big", "max_non_split_rounding_mb", 0,
                      {"'big' is not an integer"});
}

TEST(config_keys, RoundupBypassThreshold) {
  EXPECT_EQ(allocator_config{}.roundup_bypass_threshold, allocator_config::unlimited);
  EXPECT_EQ(parse_config("roundup_bypass_threshold_mb:0").roundup_bypass_threshold, 0u);
  EXPECT_EQ(parse_config("roundup_bypass_threshold_mb:1024").roundup_bypass_threshold, gib);
  expect_config_error("roundup_bypass_threshold_mb:-1", "roundup_bypass_threshold_mb", 0,
                      {"'-1' is negative", "an integer >= 0 (MiB)"});
  expect_config_error("roundup_bypass_threshold_mb:1G", "roundup_bypass_threshold_mb", 0,
                      {"'1G' is not an integer"});
}

TEST(config_keys, GarbageCollectionThreshold) {
  EXPECT_DOUBLE_EQ(parse_config("garbage_collection_threshold:0.6").garbage_collection_threshold,
                   0.6);
  EXPECT_DOUBLE_EQ(parse_config("garbage_collection_threshold:.25").garbage_collection_threshold,
                   0.25);
  EXPECT_DOUBLE_EQ(parse_config("garbage_collection_threshold:1e-3").garbage_collection_threshold,
                   0.001);
  for (const std::string_view bad : {"0", "1", "1.2", "-0.5", "0.0"}) {
    expect_config_error("garbage_collection_threshold:" + std::string(bad),
                        "garbage_collection_threshold", 0,
                        {"value " + std::string(bad) + " is out of range", "(0.0, 1.0)"});
  }
  for (const std::string_view junk : {"abc", "0.5x", "nan", "inf", "1e999"}) {
    expect_config_error("garbage_collection_threshold:" + std::string(junk),
                        "garbage_collection_threshold", 0,
                        {"'" + std::string(junk) + "' is not a number"});
  }
}

TEST(config_keys, BooleansAreExactlyTrueAndFalse) {
  struct bool_key {
    std::string_view name;
    bool allocator_config::*field;
  };
  const bool_key keys[] = {
      {"expandable_segments", &allocator_config::expandable_segments},
      {"release_lock_on_cudamalloc", &allocator_config::release_lock_on_cudamalloc},
      {"graph_capture_record_stream_reuse", &allocator_config::graph_capture_record_stream_reuse},
      {"pinned_use_cuda_host_register", &allocator_config::pinned_use_cuda_host_register},
      {"pinned_use_background_threads", &allocator_config::pinned_use_background_threads},
      {"cross_stream_reuse", &allocator_config::cross_stream_reuse},
  };
  for (const bool_key& key : keys) {
    const std::string name(key.name);
    EXPECT_FALSE(allocator_config{}.*key.field) << name;
    EXPECT_TRUE(parse_config(name + ":True").*key.field) << name;
    EXPECT_FALSE(parse_config(name + ":True," + name + ":False").*key.field) << name;
    expect_config_error(name + ":true", name, 0,
                        {name + ":true", "'true' is not a boolean", "did you mean 'True'?",
                         "expected True or False"});
    expect_config_error(name + ":1", name, 0, {"'1' is not a boolean", "expected True or False"});
    expect_config_error("backend:native," + name + ":yes", name, 15, {"'yes' is not a boolean"});
  }
}

TEST(config_keys, HipAliasesSetTheCudaKeys) {
  const allocator_config config =
      parse_config("release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True");
  EXPECT_TRUE(config.release_lock_on_cudamalloc);
  EXPECT_TRUE(config.pinned_use_cuda_host_register);
  EXPECT_EQ(config.source_of(config_key::release_lock_on_cudamalloc), config_source::api);
  EXPECT_EQ(config.source_of(config_key::pinned_use_cuda_host_register), config_source::api);
  // The message shows the spelling that was written; key() is the canonical name.
  expect_config_error("release_lock_on_hipmalloc:yes", "release_lock_on_cudamalloc", 0,
                      {"release_lock_on_hipmalloc:yes"});
}

TEST(config_keys, PerProcessMemoryFraction) {
  EXPECT_DOUBLE_EQ(allocator_config{}.per_process_memory_fraction, 1.0);
  EXPECT_DOUBLE_EQ(parse_config("per_process_memory_fraction:0").per_process_memory_fraction, 0.0);
  EXPECT_DOUBLE_EQ(parse_config("per_process_memory_fraction:1").per_process_memory_fraction, 1.0);
  EXPECT_DOUBLE_EQ(parse_config("per_process_memory_fraction:0.25").per_process_memory_fraction,
                   0.25);
  expect_config_error("per_process_memory_fraction:1.01", "per_process_memory_fraction", 0,
                      {"value 1.01 is out of range", "[0.0, 1.0]"});
  expect_config_error("per_process_memory_fraction:-0.1", "per_process_memory_fraction", 0,
                      {"value -0.1 is out of range"});
  expect_config_error("per_process_memory_fraction:half", "per_process_memory_fraction", 0,
                      {"'half' is not a number", "[0.0, 1.0]"});
}

TEST(config_keys, LargeSegmentSize) {
  EXPECT_EQ(allocator_config{}.large_segment_size, 20 * mib);
  EXPECT_EQ(parse_config("large_segment_size_mb:11").large_segment_size, 11 * mib);
  EXPECT_EQ(parse_config("large_segment_size_mb:64").large_segment_size, 64 * mib);
  expect_config_error("large_segment_size_mb:10", "large_segment_size_mb", 0,
                      {"large_segment_size_mb:10", "value 10 is out of range", "> 10 (MiB)"});
  expect_config_error("large_segment_size_mb:99999999999999", "large_segment_size_mb", 0,
                      {"is too large"});
}

TEST(config_keys, ExpandableSegmentsReserveFraction) {
  const allocator_config defaults;
  EXPECT_DOUBLE_EQ(defaults.expandable_segments_reserve, 1.125);
  EXPECT_EQ(defaults.expandable_segments_reserve_bytes, 0u);
  EXPECT_DOUBLE_EQ(parse_config("expandable_segments_reserve:0.5").expandable_segments_reserve,
                   0.5);
  EXPECT_DOUBLE_EQ(parse_config("expandable_segments_reserve:2").expandable_segments_reserve, 2.0);
  for (const std::string_view bad : {"0", "2.5", "-1"}) {
    expect_config_error("expandable_segments_reserve:" + std::string(bad),
                        "expandable_segments_reserve", 0, {"out of range", "(0.0, 2.0]", "<n>G"});
  }
  expect_config_error("expandable_segments_reserve:lots", "expandable_segments_reserve", 0,
                      {"'lots' is not a number"});
}

TEST(config_keys, ExpandableSegmentsReserveGigabytes) {
  const allocator_config config = parse_config("expandable_segments_reserve:8G");
  EXPECT_EQ(config.expandable_segments_reserve_bytes, 8 * gib);
  EXPECT_DOUBLE_EQ(config.expandable_segments_reserve, 1.125);
  // The last occurrence wins in either direction.
  const allocator_config back =
      parse_config("expandable_segments_reserve:8G,expandable_segments_reserve:0.5");
  EXPECT_EQ(back.expandable_segments_reserve_bytes, 0u);
  EXPECT_DOUBLE_EQ(back.expandable_segments_reserve, 0.5);
  expect_config_error("expandable_segments_reserve:0G", "expandable_segments_reserve", 0,
                      {"value 0G is out of range"});
  expect_config_error("expandable_segments_reserve:1.5G", "expandable_segments_reserve", 0,
                      {"'1.5' is not an integer"});
  expect_config_error("expandable_segments_reserve:8g", "expandable_segments_reserve", 0,
                      {"'8g' is not a number"});
  expect_config_error("expandable_segments_reserve:99999999999G", "expandable_segments_reserve", 0,
                      {"is too large"});
}

}  // namespace
}  // namespace streampool::test
