// cmd_config.cpp — `streampool-bench config [STRING]`: the effective configuration of STRING, or of
// the environment (STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF),
// as to_string(allocator_config) prints it, or with --summary in one line: the keys set and where
// they came from (scripts/bench's first line). A config that does not parse: message, exit status 2.
#include <cstdio>
#include <iostream>

#include "cli_common.hpp"
#include "size_parse.hpp"
#include "commands.hpp"
#include "streampool/config.hpp"
#include "streampool/errors.hpp"

namespace streampool::bench {

std::string config_summary(const allocator_config& config) {
  std::string keys;
  for (std::size_t k = 0; k < config_key_count; ++k) {
    const auto key = static_cast<config_key>(k);
    if (config.source_of(key) != config_source::default_value) keys += (keys.empty() ? "" : ", ") + std::string(key_name(key));
  }
  const std::string from = config.source_variable.empty() ? std::string("the string given") : config.source_variable;
  std::string text;
  if (keys.empty()) {
    text = config.source_variable.empty() && config.text.empty()
               ? "config: all defaults (none of STREAMPOOL_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF is set)"
               : "config: all defaults (" + from + " sets no key)";
  } else {
    text = "config: " + from + "=" + quote_input(config.text) + " sets " + keys + "; every other key at its default";
  }
  if (!config.warnings.empty()) text += "; " + std::to_string(config.warnings.size()) + " warning(s)";
  return text + "; all keys: streampool-bench config";
}

int cmd_config(const args_t& args) {
  std::string text;
  bool summary = false;
  po::options_description desc("config options");
  desc.add_options()("config-string", po::value(&text), "the config to parse (positional)")
      ("summary", po::bool_switch(&summary), "one line: the keys set, where they came from, how many warnings");
  po::positional_options_description positional;
  positional.add("config-string", 1);
  const auto vm = parse_command(args,
                                "usage: streampool-bench config [STRING]\n\n"
                                "Prints the effective configuration of STRING (e.g. "
                                "'expandable_segments:True,max_split_size_mb:256'), or, without STRING, of the\n"
                                "environment: STREAMPOOL_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, else "
                                "PYTORCH_ALLOC_CONF.\n--summary prints one line instead. Exit status 2 when the config is invalid.",
                                desc, &positional, nullptr);
  if (!vm) return exit_ok;
  try {
    const allocator_config config = vm->count("config-string") != 0 ? parse_config(text) : config_from_env();
    const std::string shown = summary ? config_summary(config) : to_string(config);
    std::cout << shown << (shown.empty() || shown.back() != '\n' ? "\n" : "");
  } catch (const config_error& e) {
    std::fprintf(stderr, "streampool-bench config: %s\n", e.what());
    return exit_usage;
  }
  return exit_ok;
}

}  // namespace streampool::bench
