// env_watch.cpp — reading the config variables and warning once per changed value (env_watch.hpp).
#include "env_watch.hpp"

#include <cstdlib>
#include <mutex>
#include <set>
#include <utility>

namespace streampool::torch_ext {

namespace {

std::optional<std::string> getenv_value(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string quoted(const std::optional<std::string>& value) {
  return value ? "'" + *value + "'" : std::string("unset");
}

}  // namespace

env_snapshot read_env(const allocator_config& config) {
  env_snapshot out;
  for (std::size_t i = 0; i < config_variables.size(); ++i) out.values[i] = getenv_value(config_variables[i]);
  out.config_text = config.text.empty() ? std::string("(defaults)") : config.text;
  out.config_text += " [backend " + std::string(to_string(config.backend)) + "]";
  out.source = config.source_variable.empty() ? (config.text.empty() ? "default" : "api") : config.source_variable;
  return out;
}

std::string env_mismatch_warnings(const env_snapshot& at_creation) {
  static std::mutex mutex;
  static std::set<std::pair<std::string, std::string>> reported;
  std::string out;
  for (std::size_t i = 0; i < config_variables.size(); ++i) {
    std::optional<std::string> now = getenv_value(config_variables[i]);
    if (now == at_creation.values[i]) continue;
    std::lock_guard<std::mutex> lock(mutex);
    if (!reported.emplace(std::string(config_variables[i]), quoted(now)).second) continue;
    if (!out.empty()) out += '\n';
    out += "streampool: " + std::string(config_variables[i]) + " is now " + quoted(now) + " (it was " +
           quoted(at_creation.values[i]) + " when the allocator read its config), but the allocator keeps the " +
           "config it was created with: in effect is " + at_creation.config_text + " (from " + at_creation.source +
           "). Changing the variable inside a running program switches nothing; set it before the process " +
           "starts (or pass install(config=...)).";
  }
  return out;
}

}  // namespace streampool::torch_ext
