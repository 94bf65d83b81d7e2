// tests/unit/config/env_test.cpp — config_from_env(): variable precedence (docs/config.md "Where the string comes from",
// docs/pytorch-compatibility.md §1.1), per-key sources, shadowed-variable warnings and error messages.
//
// The fixture saves the three variables, clears them, and restores them after each test.
#include <cstdlib>
#include <optional>

#include "config_test_support.hpp"

namespace streampool::test {
namespace {

constexpr std::array<const char*, 3> variable_names{
    "STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};

class config_env : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::size_t i = 0; i < variable_names.size(); ++i) {
      const char* value = std::getenv(variable_names[i]);
      saved_[i] = value ? std::optional<std::string>(value) : std::nullopt;
      ::unsetenv(variable_names[i]);
    }
  }
  void TearDown() override {
    for (std::size_t i = 0; i < variable_names.size(); ++i) {
      if (saved_[i]) {
        ::setenv(variable_names[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(variable_names[i]);
      }
    }
  }
  static void set(const char* name, const char* value) { ASSERT_EQ(::setenv(name, value, 1), 0); }

 private:
  std::array<std::optional<std::string>, 3> saved_;
};

TEST_F(config_env, NoVariableGivesDefaults) {
  const allocator_config config = config_from_env();
  EXPECT_EQ(config.source_variable, "");
  EXPECT_EQ(config.text, "");
  EXPECT_EQ(config.backend, backend_kind::native);
  EXPECT_TRUE(config.warnings.empty());
  for (std::size_t i = 0; i < config_key_count; ++i) {
    EXPECT_EQ(config.sources[i], config_source::default_value);
  }
}

TEST_F(config_env, EachVariableAloneIsRead) {
  const struct {
    const char* name;
    config_source source;
  } cases[] = {{"STREAMPOOL_ALLOC_CONF", config_source::env_streampool},
               {"PYTORCH_CUDA_ALLOC_CONF", config_source::env_pytorch_cuda},
               {"PYTORCH_ALLOC_CONF", config_source::env_pytorch}};
  for (const auto& c : cases) {
    set(c.name, "max_split_size_mb:64");
    const allocator_config config = config_from_env();
    EXPECT_EQ(config.source_variable, c.name);
    EXPECT_EQ(config.text, "max_split_size_mb:64");
    EXPECT_EQ(config.max_split_size, 64 * mib);
    EXPECT_EQ(config.source_of(config_key::max_split_size_mb), c.source) << c.name;
    EXPECT_EQ(config.source_of(config_key::backend), config_source::default_value);
    ::unsetenv(c.name);
  }
}

TEST_F(config_env, StreampoolBeatsPytorchCudaBeatsPytorch) {
  set("PYTORCH_ALLOC_CONF", "max_split_size_mb:20");
  set("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:40");
  EXPECT_EQ(config_from_env().max_split_size, 40 * mib);
  set("STREAMPOOL_ALLOC_CONF", "max_split_size_mb:60");
  const allocator_config config = config_from_env();
  EXPECT_EQ(config.max_split_size, 60 * mib);
  EXPECT_EQ(config.source_variable, "STREAMPOOL_ALLOC_CONF");
  EXPECT_EQ(config.source_of(config_key::max_split_size_mb), config_source::env_streampool);
}

TEST_F(config_env, EmptyButSetVariableWins) {
  set("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync");
  set("STREAMPOOL_ALLOC_CONF", "");
  const allocator_config config = config_from_env();
  EXPECT_EQ(config.backend, backend_kind::native);
  EXPECT_EQ(config.source_variable, "STREAMPOOL_ALLOC_CONF");
  EXPECT_EQ(config.source_of(config_key::backend), config_source::default_value);
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(config.warnings[0], "PYTORCH_CUDA_ALLOC_CONF is set but ignored"));
}

TEST_F(config_env, EmptyPytorchCudaVariableShadowsPytorchAllocConf) {
  set("PYTORCH_ALLOC_CONF", "max_split_size_mb:20");
  set("PYTORCH_CUDA_ALLOC_CONF", "");
  const allocator_config config = config_from_env();
  EXPECT_EQ(config.max_split_size, allocator_config::unlimited);
  EXPECT_EQ(config.source_variable, "PYTORCH_CUDA_ALLOC_CONF");
}

TEST_F(config_env, IdenticalShadowedVariableDoesNotWarn) {
  set("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
  set("STREAMPOOL_ALLOC_CONF", "expandable_segments:True");
  EXPECT_TRUE(config_from_env().warnings.empty());
  set("PYTORCH_ALLOC_CONF", "expandable_segments:False");
  const allocator_config config = config_from_env();
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_TRUE(contains(config.warnings[0], "PYTORCH_ALLOC_CONF is set but ignored"));
}

TEST_F(config_env, ErrorsStartWithTheVariableName) {
  for (const char* name : variable_names) {
    set(name, "expandable_segments:True,max_split_size_mb:2");
    try {
      (void)config_from_env();
      ADD_FAILURE() << "no config_error from " << name;
    } catch (const config_error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(std::string(name) + ": streampool config: ", 0), 0u) << message;
      EXPECT_TRUE(contains(message, "max_split_size_mb:2 at position 25"));
      EXPECT_EQ(e.key(), "max_split_size_mb");
      EXPECT_EQ(e.position(), 25u);
    }
    ::unsetenv(name);
  }
}

TEST_F(config_env, ErrorInAShadowedVariableIsNotReported) {
  set("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:2");
  set("STREAMPOOL_ALLOC_CONF", "max_split_size_mb:64");
  EXPECT_EQ(config_from_env().max_split_size, 64 * mib);
}

}  // namespace
}  // namespace streampool::test
