// env_watch.hpp — the config variables as they were when the allocator read its config, and the
// check that warns when a program changes one later (it changes nothing: the allocator keeps the
// config it was created with). The package's Python functions make the same check
// (streampool/_env_watch.py); this one serves the OOM path, which has no Python around it.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include <streampool/config.hpp>

namespace streampool::torch_ext {

/// The variables streampool reads its config from, in precedence order.
inline constexpr std::array<std::string_view, 3> config_variables = {
    "STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};

struct env_snapshot {
  std::array<std::optional<std::string>, 3> values;  ///< by config_variables; nullopt = unset
  std::string config_text;                           ///< the config in effect (to_string of it, one line)
  std::string source;                                ///< where it came from: a variable, "api" or "default"
};

/// The variables now, and a one-line description of `config`.
[[nodiscard]] env_snapshot read_env(const allocator_config& config);

/// For each variable whose value differs from `at_creation`, a warning naming it, its new value and
/// the config in effect; each (variable, value) pair is reported once per process, so a second call
/// for the same change returns "". Lines are separated by '\n'. Thread-safe.
[[nodiscard]] std::string env_mismatch_warnings(const env_snapshot& at_creation);

}  // namespace streampool::torch_ext
