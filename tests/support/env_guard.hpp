// env_guard.hpp — unsets the three config variables for one test and restores them afterwards,
// for tests of config_from_env() and backend selection.
#pragma once

#include <array>
#include <cstdlib>
#include <optional>
#include <string>

namespace streampool::testing {

/// Sets or unsets the three config variables for one test and restores them afterwards.
class env_guard {
 public:
  env_guard() {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      const char* value = std::getenv(names_[i]);
      saved_[i] = value ? std::optional<std::string>(value) : std::nullopt;
      ::unsetenv(names_[i]);
    }
  }
  ~env_guard() {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (saved_[i]) {
        ::setenv(names_[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(names_[i]);
      }
    }
  }
  env_guard(const env_guard&) = delete;
  env_guard& operator=(const env_guard&) = delete;

 private:
  static constexpr std::array<const char*, 3> names_{"STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
                                                     "PYTORCH_ALLOC_CONF"};
  std::array<std::optional<std::string>, 3> saved_;
};

}  // namespace streampool::testing
