// pytorch_versions_test.cpp — which stock PyTorch accepts a key and a whole config
// (pytorch_compatibility_of), and docs/config.md's "Stock PyTorch" column equal to the key table.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "streampool/config.hpp"

namespace streampool {
namespace {

TEST(pytorch_versions, OldestReleaseAcceptingEveryKeySet) {
  EXPECT_EQ(pytorch_compatibility_of(parse_config("")).since, "");
  EXPECT_TRUE(pytorch_compatibility_of(parse_config("")).stock);
  EXPECT_EQ(pytorch_compatibility_of(parse_config("max_split_size_mb:128")).since, "1.10");
  EXPECT_EQ(pytorch_compatibility_of(parse_config("max_split_size_mb:128,roundup_power2_divisions:4")).since, "1.12");
  // The list form of roundup_power2_divisions needs 2.0; a list that is one value does not.
  EXPECT_EQ(pytorch_compatibility_of(parse_config("roundup_power2_divisions:[256:1,512:2,>:8]")).since, "2.0");
  EXPECT_EQ(pytorch_compatibility_of(parse_config("roundup_power2_divisions:[>:4]")).since, "1.12");
  EXPECT_EQ(pytorch_compatibility_of(parse_config("expandable_segments:True,max_split_size_mb:256")).since, "2.1");
  // 2.10 sorts after 2.9, "main" after every release.
  EXPECT_EQ(pytorch_compatibility_of(parse_config("graph_capture_record_stream_reuse:True,"
                                                  "pinned_reserve_segment_size_mb:64")).since, "2.10");
  EXPECT_EQ(pytorch_compatibility_of(parse_config("large_segment_size_mb:64,expandable_segments:True")).since, "main");
}

TEST(pytorch_versions, StreampoolOnlyKeysAreNamed) {
  const pytorch_compatibility c =
      pytorch_compatibility_of(parse_config("backend:cudaMallocAsync,async_pool:dedicated,debug_checks:True"));
  EXPECT_FALSE(c.stock);
  EXPECT_EQ(c.streampool_only, (std::vector<std::string>{"async_pool", "debug_checks"}));
  EXPECT_EQ(c.since, "2.0");
  EXPECT_FALSE(pytorch_compatibility_of(parse_config("roundup_bypass_threshold_mb:4096")).stock);
}

/// docs/config.md's Keys table: the "Stock PyTorch" cell of `key`'s row.
std::string doc_cell(const std::string& doc, std::string_view key) {
  const std::string start = "| `" + std::string(key) + "`";
  const std::size_t row = doc.find("\n" + start);
  if (row == std::string::npos) return "<no row>";
  const std::size_t end = doc.find('\n', row + 1);
  const std::string line = doc.substr(row + 1, end - row - 1);
  const std::size_t last = line.rfind('|', line.size() - 2);
  std::string cell = line.substr(last + 1, line.size() - last - 2);
  while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
  while (!cell.empty() && cell.back() == ' ') cell.pop_back();
  return cell;
}

TEST(pytorch_versions, ConfigDocShowsTheKeyTable) {
  std::ifstream in(std::string(STREAMPOOL_DOCS_DIR) + "/config.md");
  ASSERT_TRUE(in) << "docs/config.md not found";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (std::size_t i = 0; i < config_key_count; ++i) {
    const auto key = static_cast<config_key>(i);
    const std::string_view since = key_pytorch_since(key);
    const std::string expected = since.empty() ? "no" : since == "main" ? "after 2.9" : "since " + std::string(since);
    const std::string cell = doc_cell(doc, key_name(key));
    EXPECT_EQ(cell.substr(0, expected.size()), expected) << key_name(key) << ": docs/config.md says '" << cell << "'";
    EXPECT_TRUE(cell.size() == expected.size() || cell[expected.size()] == ' ') << key_name(key) << ": " << cell;
  }
}

}  // namespace
}  // namespace streampool
