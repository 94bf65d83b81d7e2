// cmd_config.cpp — `streampool-bench config [STRING]`: the effective configuration of STRING, or of
// the environment (STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF),
// as to_string(allocator_config) prints it. A config that does not parse: message, exit status 2.
#include <cstdio>
#include <iostream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "streampool/config.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {

int cmd_config(const args_t& args) {
  std::string text;
  po::options_description desc("config options");
  desc.add_options()("config-string", po::value(&text), "the config to parse (positional)");
  po::positional_options_description positional;
  positional.add("config-string", 1);
  const auto vm = parse_command(args,
                                "usage: streampool-bench config [STRING]\n\n"
                                "Prints the effective configuration of STRING (e.g. "
                                "'expandable_segments:True,max_split_size_mb:256'), or, without STRING, of the\n"
                                "environment: STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else "
                                "PYTORCH_ALLOC_CONF.\nExit status 2 when the config is invalid.",
                                desc, &positional, nullptr);
  if (!vm) return exit_ok;
  try {
    const allocator_config config = vm->count("config-string") != 0 ? parse_config(text) : config_from_env();
    const std::string shown = to_string(config);
    std::cout << shown << (shown.empty() || shown.back() != '\n' ? "\n" : "");
  } catch (const config_error& e) {
    std::fprintf(stderr, "streampool-bench config: %s\n", e.what());
    return exit_usage;
  }
  return exit_ok;
}

}  // namespace streampool::bench
