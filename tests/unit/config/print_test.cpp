// tests/unit/config/print_test.cpp — the effective-configuration dump and the enum names.
//
// to_string(allocator_config) shows every key with value and source, the warnings and what the
// backend in effect reads; the values it prints parse back to the same configuration.
#include <sstream>
#include <vector>

#include "config_test_support.hpp"

namespace streampool::test {
namespace {

/// The dump line of `key` ("  max_split_size_mb   64   api"), or "" when missing.
std::string line_of(const std::string& dump, config_key key) {
  std::istringstream lines(dump);
  std::string line;
  const std::string prefix = "  " + std::string(key_name(key)) + " ";
  while (std::getline(lines, line)) {
    if (line.rfind(prefix, 0) == 0) {
      return line;
    }
  }
  return "";
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string word; in >> word;) {
    words.push_back(word);
  }
  return words;
}

TEST(config_print, EnumNames) {
  EXPECT_EQ(to_string(backend_kind::native), "native");
  EXPECT_EQ(to_string(backend_kind::cuda_malloc_async), "cudaMallocAsync");
  EXPECT_EQ(to_string(async_pool_kind::device_default), "default");
  EXPECT_EQ(to_string(async_pool_kind::dedicated), "dedicated");
  EXPECT_EQ(to_string(config_source::default_value), "default");
  EXPECT_EQ(to_string(config_source::env_streampool), "STREAMPOOL_ALLOC_CONF");
  EXPECT_EQ(to_string(config_source::env_pytorch_cuda), "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(to_string(config_source::env_pytorch), "PYTORCH_ALLOC_CONF");
  EXPECT_EQ(to_string(config_source::api), "api");
}

TEST(config_print, DefaultsListEveryKeyWithItsDefault) {
  const std::string dump = to_string(allocator_config{});
  EXPECT_TRUE(contains(dump, "(all defaults)"));
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const std::vector<std::string> words = words_of(line_of(dump, config_key(i)));
    ASSERT_EQ(words.size(), 3u) << key_name(config_key(i)) << "\n" << dump;
    EXPECT_EQ(words[2], "default");
  }
  EXPECT_EQ(words_of(line_of(dump, config_key::max_split_size_mb))[1], "unlimited");
  EXPECT_EQ(words_of(line_of(dump, config_key::roundup_bypass_threshold_mb))[1], "unlimited");
  EXPECT_EQ(words_of(line_of(dump, config_key::max_non_split_rounding_mb))[1], "20");
  EXPECT_EQ(words_of(line_of(dump, config_key::backend))[1], "native");
  EXPECT_EQ(words_of(line_of(dump, config_key::expandable_segments_reserve))[1], "1.125");
  EXPECT_EQ(words_of(line_of(dump, config_key::roundup_power2_divisions))[1],
            "[1:0,2:0,4:0,8:0,16:0,32:0,64:0,128:0,256:0,512:0,1024:0,2048:0,4096:0,8192:0,"
            "16384:0,32768:0]");
  EXPECT_TRUE(contains(dump, "backend in effect: native; it uses backend, max_split_size_mb"));
  EXPECT_TRUE(contains(dump, "it ignores async_pool;"));
  EXPECT_FALSE(contains(dump, "accepted but not implemented")) << "every key is honoured";
  EXPECT_TRUE(contains(dump, "it uses backend, max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
                             "roundup_bypass_threshold_mb, garbage_collection_threshold, expandable_segments, "
                             "release_lock_on_cudamalloc"));
  EXPECT_TRUE(contains(dump,
                       "the pinned host allocator (make_host_allocator) uses "
                       "pinned_use_cuda_host_register, pinned_num_register_threads"));
  EXPECT_FALSE(contains(dump, "never used by streampool"));
}

TEST(config_print, SourcesAndTheVariableAreShown) {
  allocator_config config = parse_config("max_split_size_mb:64,roundup_power2_divisions:4",
                                         config_source::env_pytorch_cuda);
  config.source_variable = "PYTORCH_CUDA_ALLOC_CONF";
  const std::string dump = to_string(config);
  EXPECT_TRUE(contains(
      dump, "(from PYTORCH_CUDA_ALLOC_CONF=\"max_split_size_mb:64,roundup_power2_divisions:4\")"));
  EXPECT_EQ(words_of(line_of(dump, config_key::max_split_size_mb)),
            (std::vector<std::string>{"max_split_size_mb", "64", "PYTORCH_CUDA_ALLOC_CONF"}));
  EXPECT_EQ(words_of(line_of(dump, config_key::roundup_power2_divisions)),
            (std::vector<std::string>{"roundup_power2_divisions", "4", "PYTORCH_CUDA_ALLOC_CONF"}));
  EXPECT_EQ(words_of(line_of(dump, config_key::backend))[2], "default");

  const std::string api = to_string(parse_config("backend:cudaMallocAsync,async_pool:dedicated"));
  EXPECT_TRUE(contains(api, "(from the API: \"backend:cudaMallocAsync,async_pool:dedicated\")"));
  EXPECT_EQ(words_of(line_of(api, config_key::async_pool)),
            (std::vector<std::string>{"async_pool", "dedicated", "api"}));
  EXPECT_TRUE(
      contains(api,
               "backend in effect: cudaMallocAsync; it uses backend, "
               "per_process_memory_fraction, async_pool, debug_checks;"));
  EXPECT_TRUE(contains(api, "it ignores max_split_size_mb"));
}

TEST(config_print, WarningsArePrinted) {
  const allocator_config config = parse_config("backend:cudaMallocAsync,max_split_size_mb:64");
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(to_string(config), "warning: " + config.warnings[0] + "\n"));
}

TEST(config_print, RoundupListIsRenderedPerInterval) {
  const std::string dump = to_string(parse_config("roundup_power2_divisions:[256:1,>:8]"));
  EXPECT_EQ(words_of(line_of(dump, config_key::roundup_power2_divisions))[1],
            "[1:1,2:1,4:1,8:1,16:1,32:1,64:1,128:1,256:1,512:8,1024:8,2048:8,4096:8,8192:8,"
            "16384:8,32768:8]");
}

TEST(config_print, ApiSizesThatAreNotWholeMebibytesKeepTheFraction) {
  allocator_config config;
  config.max_split_size = 20 * mib + mib / 2;
  config.expandable_segments_reserve_bytes = 3 * gib;
  const std::string dump = to_string(config);
  EXPECT_EQ(words_of(line_of(dump, config_key::max_split_size_mb))[1], "20.5");
  EXPECT_EQ(words_of(line_of(dump, config_key::expandable_segments_reserve))[1], "3G");
}

TEST(config_print, PrintedValuesParseBack) {
  const allocator_config original = parse_config(
      "backend:cudaMallocAsync,max_split_size_mb:64,max_non_split_rounding_mb:32,"
      "roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1],roundup_bypass_threshold_mb:"
      "512,"
      "garbage_collection_threshold:0.7,expandable_segments:True,release_lock_on_cudamalloc:True,"
      "graph_capture_record_stream_reuse:True,per_process_memory_fraction:0.3,"
      "large_segment_size_mb:32,expandable_segments_reserve:6G,async_pool:dedicated,"
      "debug_checks:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:16,"
      "pinned_use_background_threads:True,pinned_reserve_segment_size_mb:128,cross_stream_reuse:True");
  const std::string dump = to_string(original);
  std::string rebuilt;
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const std::vector<std::string> words = words_of(line_of(dump, config_key(i)));
    ASSERT_EQ(words.size(), 3u) << dump;
    EXPECT_EQ(words[2], "api");
    rebuilt += (rebuilt.empty() ? "" : ",") + words[0] + ":" + words[1];
  }
  const allocator_config again = parse_config(rebuilt);
  EXPECT_EQ(again.backend, original.backend);
  EXPECT_EQ(again.max_split_size, original.max_split_size);
  EXPECT_EQ(again.max_non_split_rounding, original.max_non_split_rounding);
  EXPECT_EQ(again.roundup_power2_divisions, original.roundup_power2_divisions);
  EXPECT_EQ(again.roundup_bypass_threshold, original.roundup_bypass_threshold);
  EXPECT_EQ(again.garbage_collection_threshold, original.garbage_collection_threshold);
  EXPECT_EQ(again.per_process_memory_fraction, original.per_process_memory_fraction);
  EXPECT_EQ(again.large_segment_size, original.large_segment_size);
  EXPECT_EQ(again.expandable_segments_reserve_bytes, original.expandable_segments_reserve_bytes);
  EXPECT_EQ(again.async_pool, original.async_pool);
  EXPECT_EQ(again.cross_stream_reuse, original.cross_stream_reuse);
  EXPECT_EQ(again.debug_checks, original.debug_checks);
  EXPECT_EQ(again.pinned_num_register_threads, original.pinned_num_register_threads);
  EXPECT_EQ(again.pinned_reserve_segment_size_mb, original.pinned_reserve_segment_size_mb);
  EXPECT_EQ(again.warnings, original.warnings);
}

}  // namespace
}  // namespace streampool::test
