// commands.hpp — the subcommands of streampool-bench. Each takes the words after its name, prints
// its report (or --help) and returns the exit status: 0 ok, 1 a run failed (leak check, backend
// error), 2 bad input (thrown as usage_error and turned into status 2 by main).
#pragma once

#include <string>
#include <vector>

#include "streampool/config.hpp"

namespace streampool::bench {

using args_t = std::vector<std::string>;

int cmd_config(const args_t& args);
int cmd_latency(const args_t& args);
int cmd_workload(const args_t& args);
int cmd_replay(const args_t& args);
int cmd_tune(const args_t& args);
int cmd_compare(const args_t& args);
int cmd_sleep(const args_t& args);

/// `config --summary`, one line: "config: PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' sets
/// expandable_segments; every other key at its default; all keys: streampool-bench config", or
/// "config: all defaults (none of ... is set); ...", with the number of warnings when there are any.
[[nodiscard]] std::string config_summary(const allocator_config& config);

}  // namespace streampool::bench
