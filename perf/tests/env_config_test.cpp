// env_config_test.cpp — STREAMPOOL_ALLOC_CONF applies to the streampool backends listed without a
// config (Note [The environment's config]), never to a configured one, a peer, or a backend its
// `backend` key contradicts; a bad value is bad input.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend_registry.hpp"
#include "cli_common.hpp"

namespace streampool::bench {
namespace {

class env_config : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("STREAMPOOL_ALLOC_CONF");
    had_ = old != nullptr;
    if (had_) old_ = old;
  }
  void TearDown() override {
    if (had_) ::setenv("STREAMPOOL_ALLOC_CONF", old_.c_str(), 1);
    else ::unsetenv("STREAMPOOL_ALLOC_CONF");
  }
  bool had_ = false;
  std::string old_;
};

TEST_F(env_config, AppliesToUnconfiguredStreampoolBackendsOnly) {
  ::setenv("STREAMPOOL_ALLOC_CONF", "expandable_segments:True", 1);
  std::vector<backend_spec> specs = parse_backend_list("native,native=max_split_size_mb:256,cudaMallocAsync,cuda");
  const std::string note = apply_env_config(specs);
  EXPECT_EQ(specs[0].config_text, "expandable_segments:True");
  EXPECT_TRUE(specs[0].from_env);
  EXPECT_EQ(specs[0].config_label(), "STREAMPOOL_ALLOC_CONF: expandable_segments:True");
  EXPECT_EQ(specs[1].config_text, "max_split_size_mb:256");
  EXPECT_FALSE(specs[1].from_env);
  EXPECT_TRUE(specs[2].from_env);
  EXPECT_EQ(specs[3].config_text, "");
  EXPECT_NE(note.find("applied to native, cudaMallocAsync"), std::string::npos) << note;
  EXPECT_TRUE(config_for(specs[0]).expandable_segments);
}

TEST_F(env_config, BackendKeyPicksTheEntries) {
  ::setenv("STREAMPOOL_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  std::vector<backend_spec> specs = parse_backend_list("native,cudaMallocAsync");
  const std::string note = apply_env_config(specs);
  EXPECT_FALSE(specs[0].from_env);
  EXPECT_TRUE(specs[1].from_env);
  EXPECT_NE(note.find("not to native"), std::string::npos) << note;
}

TEST_F(env_config, UnsetOrEmptyChangesNothingAndBadIsBadInput) {
  ::unsetenv("STREAMPOOL_ALLOC_CONF");
  std::vector<backend_spec> specs = parse_backend_list("native");
  EXPECT_EQ(apply_env_config(specs), "");
  EXPECT_EQ(specs[0].config_text, "");
  ::setenv("STREAMPOOL_ALLOC_CONF", " ", 1);
  EXPECT_EQ(apply_env_config(specs), "");
  ::setenv("STREAMPOOL_ALLOC_CONF", "max_split_size_mb:1", 1);
  try {
    (void)apply_env_config(specs);
    FAIL() << "expected usage_error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("STREAMPOOL_ALLOC_CONF: streampool config: max_split_size_mb:1"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace streampool::bench
