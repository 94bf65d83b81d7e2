// tests/unit/torch_ext/env_watch_test.cpp — the extension allocator's config-variable watch
// (python/csrc/env_watch.cpp), the part of the PyTorch extension that needs no torch: what is
// recorded at creation, the warning text, and that each changed value is reported once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "../../../python/csrc/env_watch.hpp"

namespace streampool::torch_ext {
namespace {

/// Sets (or unsets) the three variables for one test and restores them after.
class env_watch_test : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::size_t i = 0; i < config_variables.size(); ++i) {
      const char* v = std::getenv(std::string(config_variables[i]).c_str());
      saved_[i] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(std::string(config_variables[i]).c_str());
    }
  }
  void TearDown() override {
    for (std::size_t i = 0; i < config_variables.size(); ++i) {
      const std::string name(config_variables[i]);
      if (saved_[i]) ::setenv(name.c_str(), saved_[i]->c_str(), 1); else ::unsetenv(name.c_str());
    }
  }
  std::array<std::optional<std::string>, 3> saved_;
};

TEST_F(env_watch_test, RecordsTheVariablesAndTheConfigInEffect) {
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  const env_snapshot snap = read_env(config_from_env());
  EXPECT_FALSE(snap.values[0].has_value());
  ASSERT_TRUE(snap.values[1].has_value());
  EXPECT_EQ(*snap.values[1], "backend:cudaMallocAsync");
  EXPECT_EQ(snap.source, "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_NE(snap.config_text.find("backend:cudaMallocAsync [backend cudaMallocAsync]"), std::string::npos)
      << snap.config_text;
  EXPECT_EQ(env_mismatch_warnings(snap), "");  // nothing changed
}

TEST_F(env_watch_test, AChangedVariableIsNamedOnceWithItsValueAndTheConfig) {
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  const env_snapshot snap = read_env(config_from_env());
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "", 1);  // "resetting" it, the misconception
  const std::string first = env_mismatch_warnings(snap);
  EXPECT_NE(first.find("PYTORCH_CUDA_ALLOC_CONF is now ''"), std::string::npos) << first;
  EXPECT_NE(first.find("it was 'backend:cudaMallocAsync'"), std::string::npos) << first;
  EXPECT_NE(first.find("in effect is backend:cudaMallocAsync"), std::string::npos) << first;
  EXPECT_NE(first.find("(from PYTORCH_CUDA_ALLOC_CONF)"), std::string::npos) << first;
  EXPECT_EQ(env_mismatch_warnings(snap), "");  // once per value
  ::setenv("STREAMPOOL_ALLOC_CONF", "expandable_segments:True", 1);
  const std::string second = env_mismatch_warnings(snap);
  EXPECT_NE(second.find("STREAMPOOL_ALLOC_CONF is now 'expandable_segments:True' (it was unset"), std::string::npos)
      << second;
  EXPECT_EQ(second.find("PYTORCH_CUDA_ALLOC_CONF is now"), std::string::npos) << second;  // reported already
}

TEST_F(env_watch_test, ConfigFromTheApiIsNamedAsSuch) {
  const env_snapshot snap = read_env(parse_config("max_split_size_mb:64", config_source::api));
  EXPECT_EQ(snap.source, "api");
  const env_snapshot defaults = read_env(parse_config("", config_source::api));
  EXPECT_EQ(defaults.source, "default");
  EXPECT_NE(defaults.config_text.find("(defaults) [backend native]"), std::string::npos) << defaults.config_text;
}

}  // namespace
}  // namespace streampool::torch_ext
