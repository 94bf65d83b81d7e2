// bench_main.cpp — streampool-bench's entry point: picks the subcommand and maps errors to exit
// statuses (2 = bad input, with a message on stderr naming the problem; 1 = a failed run).
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "cli_common.hpp"
#include "commands.hpp"
#include "isolated_run.hpp"
#include "size_parse.hpp"
#include "streampool/errors.hpp"

#ifndef STREAMPOOL_BENCH_VERSION
#define STREAMPOOL_BENCH_VERSION "unknown"
#endif
#ifndef STREAMPOOL_BENCH_GIT_COMMIT
#define STREAMPOOL_BENCH_GIT_COMMIT "unknown"
#endif

namespace {

using namespace streampool::bench;

struct command {
  int (*run)(const args_t&);
  const char* summary;
};

const std::map<std::string, command>& commands() {
  static const std::map<std::string, command> table = {
      {"compare", {cmd_compare, "short comparison of every backend and peer (latency + random workload)"}},
      {"config", {cmd_config, "print the effective config of STRING, or of the environment"}},
      {"latency", {cmd_latency, "alloc+free pair latency and throughput per backend x size x threads"}},
      {"sleep", {cmd_sleep, "sleep and wake of a pool: offload/restore GiB/s against plain copies, discard wake time"}},
      {"replay", {cmd_replay, "replay an allocation trace through each backend: peaks, device mallocs"}},
      {"tune", {cmd_tune, "replay a trace under candidate configs and recommend one"}},
      {"workload", {cmd_workload, "run a synthetic workload: random, multistream, trainloop, graphloop"}},
  };
  return table;
}

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: streampool-bench COMMAND [options]   (streampool-bench COMMAND --help for its options)\n\n"
               "Which allocator and which config should I use, and what does it cost? Runs on the GPU, or\n"
               "on a simulated device when there is none (--driver auto, the default).\n\ncommands:\n");
  for (const auto& [name, cmd] : commands()) std::fprintf(to, "  %-10s %s\n", name.c_str(), cmd.summary);
  std::fprintf(to, "\nDocumentation: docs/harness.md\n");
}

}  // namespace

int main(int argc, char** argv) {
  const args_t all(argv + 1, argv + argc);
  if (all.empty()) {
    usage(stderr);
    return exit_usage;
  }
  const std::string& name = all.front();
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return exit_ok;
  }
  if (name == "--version") {
    std::printf("streampool-bench %s (git %s)\n", STREAMPOOL_BENCH_VERSION, STREAMPOOL_BENCH_GIT_COMMIT);
    return exit_ok;
  }
  enable_child_rows(argv[0]);  // replay and compare run each backend's row in a child process
  const auto it = commands().find(name);
  if (it == commands().end()) {
    std::fprintf(stderr, "streampool-bench: unknown command %s\n\n", quote_input(name).c_str());
    usage(stderr);
    return exit_usage;
  }
  try {
    return it->second.run(args_t(all.begin() + 1, all.end()));
  } catch (const child_bad_input&) {  // the child printed the message: Note [Bad input stops the run once]
    return exit_usage;
  } catch (const usage_error& e) {
    std::fprintf(stderr, "streampool-bench %s: %s\n", name.c_str(), clip_quoted(e.what()).c_str());
    return exit_usage;
  } catch (const streampool::cuda_error& e) {  // the device failed: not the user's input
    std::fprintf(stderr, "streampool-bench %s: failed: %s\n", name.c_str(), e.what());
    return exit_failed;
  } catch (const streampool::error& e) {  // config_error, read_trace errors: bad input
    std::fprintf(stderr, "streampool-bench %s: %s\n", name.c_str(), clip_quoted(e.what()).c_str());
    return exit_usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streampool-bench %s: failed: %s\n", name.c_str(), e.what());
    return exit_failed;
  }
}
