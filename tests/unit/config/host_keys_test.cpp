// tests/unit/config/host_keys_test.cpp — async_pool and the pinned_* keys of the pinned host
// allocator: validated like PyTorch does, and used (no warning) beside either backend.
//
// Also key_used_by(), the table the warnings and the effective-config dump are built from.
#include "config_test_support.hpp"

namespace streampool::test {
namespace {

TEST(config_host_keys, AsyncPool) {
  EXPECT_EQ(allocator_config{}.async_pool, async_pool_kind::device_default);
  EXPECT_EQ(parse_config("backend:cudaMallocAsync,async_pool:default").async_pool,
            async_pool_kind::device_default);
  EXPECT_EQ(parse_config("backend:cudaMallocAsync,async_pool:dedicated").async_pool,
            async_pool_kind::dedicated);
  expect_config_error("async_pool:Dedicated", "async_pool", 0,
                      {"async_pool:Dedicated", "unknown value 'Dedicated'",
                       "did you mean 'dedicated'?", "expected default or dedicated"});
  expect_config_error("async_pool:private", "async_pool", 0, {"expected default or dedicated"});
}

TEST(config_host_keys, PinnedNumRegisterThreads) {
  EXPECT_EQ(allocator_config{}.pinned_num_register_threads, 1u);
  for (const std::size_t good : {1u, 2u, 8u, 128u}) {
    EXPECT_EQ(parse_config("pinned_num_register_threads:" + std::to_string(good))
                  .pinned_num_register_threads,
              good);
  }
  for (const std::string_view bad : {"0", "3", "96", "256"}) {
    expect_config_error(
        "pinned_num_register_threads:" + std::string(bad), "pinned_num_register_threads", 0,
        {"value " + std::string(bad) + " is out of range", "a power of two <= 128"});
  }
  // PyTorch's messages are part of ours.
  expect_config_error("pinned_num_register_threads:3", "pinned_num_register_threads", 0,
                      {"Number of register threads has to be power of 2"});
  expect_config_error("pinned_num_register_threads:256", "pinned_num_register_threads", 0,
                      {"Number of register threads should be less than or equal to 128"});
  expect_config_error("pinned_num_register_threads:four", "pinned_num_register_threads", 0,
                      {"'four' is not an integer"});
  expect_config_error("pinned_num_register_threads:99999999999999999999",
                      "pinned_num_register_threads", 0, {"is too large"});
}

TEST(config_host_keys, PinnedReserveSegmentSize) {
  EXPECT_EQ(allocator_config{}.pinned_reserve_segment_size_mb, 0u);
  EXPECT_EQ(parse_config("pinned_reserve_segment_size_mb:1").pinned_reserve_segment_size_mb, 1u);
  EXPECT_EQ(parse_config("pinned_reserve_segment_size_mb:4096").pinned_reserve_segment_size_mb,
            4096u);
  expect_config_error("pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb", 0,
                      {"value 0 is out of range", "an integer > 0 (MiB)",
                       "Pinned reserve segment size has to be greater than 0"});
  expect_config_error("pinned_reserve_segment_size_mb:1MB", "pinned_reserve_segment_size_mb", 0,
                      {"'1MB' is not an integer"});
}

TEST(config_host_keys, HostKeysAreHonouredWithoutWarnings) {
  // The pinned host allocator (src/host) uses every pinned_* key, beside either backend.
  for (const char* backend : {"native", "cudaMallocAsync"}) {
    const allocator_config config = parse_config(
        std::string("backend:") + backend +
        ",pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
        "pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64");
    EXPECT_TRUE(config.warnings.empty()) << backend << ": " << (config.warnings.empty() ? "" : config.warnings[0]);
    EXPECT_TRUE(config.pinned_use_cuda_host_register);
    EXPECT_EQ(config.pinned_num_register_threads, 8u);
    EXPECT_TRUE(config.pinned_use_background_threads);
    EXPECT_EQ(config.pinned_reserve_segment_size_mb, 64u);
  }
}

TEST(config_key_use, KeyUsedByFollowsTheSpecTable) {
  using k = config_key;
  constexpr auto native = backend_kind::native;
  constexpr auto async = backend_kind::cuda_malloc_async;
  EXPECT_TRUE(key_used_by(k::backend, native));
  EXPECT_TRUE(key_used_by(k::backend, async));
  for (const k key :
       {k::max_split_size_mb, k::max_non_split_rounding_mb, k::roundup_power2_divisions,
        k::roundup_bypass_threshold_mb, k::garbage_collection_threshold, k::expandable_segments,
        k::large_segment_size_mb, k::expandable_segments_reserve, k::release_lock_on_cudamalloc,
        k::graph_capture_record_stream_reuse}) {
    EXPECT_TRUE(key_used_by(key, native)) << key_name(key);
    EXPECT_FALSE(key_used_by(key, async)) << key_name(key);
  }
  EXPECT_TRUE(key_used_by(k::per_process_memory_fraction, native));
  EXPECT_TRUE(key_used_by(k::per_process_memory_fraction, async));
  EXPECT_FALSE(key_used_by(k::async_pool, native));
  EXPECT_TRUE(key_used_by(k::async_pool, async));
  for (const k key : {k::pinned_use_cuda_host_register, k::pinned_num_register_threads,
                      k::pinned_use_background_threads, k::pinned_reserve_segment_size_mb}) {
    EXPECT_TRUE(key_used_by(key, native)) << key_name(key);
    EXPECT_TRUE(key_used_by(key, async)) << key_name(key);
  }
  EXPECT_FALSE(key_used_by(k::count_, native));
}

}  // namespace
}  // namespace streampool::test
