// latency.hpp — the alloc+free pair measurement shared by `latency` and `compare`: one backend,
// one size, T threads each on its own stream, a live set of `depth` blocks per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend_registry.hpp"
#include "cli_common.hpp"

namespace streampool::bench {

struct latency_params {
  std::size_t size = 1 << 20;
  int depth = 8;              ///< blocks of `size` each thread keeps live while pairs run
  int threads = 1;
  int iterations = 20000;     ///< pairs per thread per repeat (upper bound, see batch_budget)
  int repeat = 5;
  double batch_budget = 0.5;  ///< seconds one batch may take; iterations shrink to fit
  /// Streams each thread cycles through, one pair per stream in turn: with more than one, a pair
  /// takes the block the previous pair freed on another stream (the cost of cross-stream reuse).
  int streams_per_thread = 1;
};

struct latency_result {
  double ns_per_pair = 0.0;       ///< median over repeats of the mean per-thread time per pair
  double pairs_per_second = 0.0;  ///< median over repeats of threads x iterations / wall time
  int iterations = 0;             ///< pairs per thread per repeat actually run
  std::int64_t timed_device_mallocs = 0;  ///< device mallocs during the timed batches (0 = all cache hits)
  std::string leak = "ok";
  std::string error;              ///< non-empty: the run failed (message)
};

/// Runs one measurement on a fresh allocator (and, on the sim, a fresh simulated device).
/// Never throws for a backend failure: the result carries the error.
[[nodiscard]] latency_result measure_latency(const backend_spec& spec, const driver_choice& choice,
                                             const latency_params& params);

}  // namespace streampool::bench
