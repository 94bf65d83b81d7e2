// sim_pool_band.hpp — the evidence behind sim_pool_peak_error (streampool/sim_driver.hpp): every
// comparison of the sim's model of CUDA's stream-ordered pool with an H200 that we have, and the
// measured ranges the harness prints beside the bound (Note [Sim pool error band]).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace streampool::bench {

/// What a sim pool figure was compared with.
enum class pool_evidence {
  replay,    ///< the trace's allocations and frees replayed on the H200 (pool probe = replay --driver cuda)
  rerun,     ///< the training rerun under PyTorch's own backend:cudaMallocAsync (frees wait for kernels)
  reported,  ///< measured once by someone else, the trace not kept (no figures here to recompute)
};

struct pool_comparison {
  const char* trace;             ///< the trace's name (tests/data), or what was measured
  pool_evidence against;
  double h200_mib = 0;           ///< the H200's peak reserved (0 for `reported`)
  double sim_mib = 0;            ///< the sim's peak reserved for the same trace (0 for `reported`)
  double reported_error = 0;     ///< `reported` only: the relative error as reported
  /// (sim - H200) / H200.
  [[nodiscard]] double error() const {
    return against == pool_evidence::reported ? reported_error : (sim_mib - h200_mib) / h200_mib;
  }
};

/// Every comparison we have, in the order of Note [Sim pool error band].
[[nodiscard]] const std::vector<pool_comparison>& sim_pool_comparisons();

struct error_range {
  double low = 0;
  double high = 0;
  int count = 0;
};

/// The smallest and largest error among the comparisons of one kind.
[[nodiscard]] error_range measured_range(pool_evidence against);

/// The largest |error| of all comparisons.
[[nodiscard]] double largest_measured_error();

/// "-5.4% to +4.1% replaying 5 training traces on an H200, ..." : what the note above a table of
/// estimates says was measured.
[[nodiscard]] std::string measured_text();

}  // namespace streampool::bench
