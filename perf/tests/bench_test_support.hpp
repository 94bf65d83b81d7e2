// bench_test_support.hpp — what the harness's unit tests share: a driver choice for the
// simulated device (8 GiB), as `--driver sim` would make it.
#pragma once

#include "cli_common.hpp"

namespace streampool::bench {

inline driver_choice sim_choice() {
  driver_choice choice;
  choice.sim = true;
  choice.why = "test";
  choice.sim_capacity = std::size_t{8} << 30;
  return choice;
}

}  // namespace streampool::bench
