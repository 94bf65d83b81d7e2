// workloads.hpp — the synthetic workloads of `workload` and `compare`: `random` (RMM's
// random_allocations shape), `multistream` (producer/consumer streams with record_stream) and
// `trainloop` (a training step's activation pattern) and `graphloop` (a CUDA-graph-captured loop).
// Each frees everything it allocates, so the run's leak check is meaningful.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend_registry.hpp"
#include "cli_common.hpp"

namespace streampool::bench {

struct workload_params {
  std::uint64_t seed = 42;
  std::size_t count = 0;     ///< random: allocations (0 = 10000); multistream: buffers per step (0 = 16)
  std::size_t max_size = 0;  ///< largest request (0 = 64 MiB random, 16 MiB multistream)
  std::size_t live_cap = std::size_t{16000} << 20;  ///< random: live bytes cap (RMM: 16000 MiB)
  int steps = 0;             ///< multistream (0 = 200), trainloop (0 = 20)
  int streams = 4;           ///< multistream: 1 producer + (streams - 1) consumers
  int layers = 8;            ///< trainloop
  int hidden = 1024;         ///< trainloop: model width d
  int graphs = 3;            ///< graphloop: graphs captured (shape buckets), sharing one pool
  std::string backend;       ///< registry name of the backend being run (run_workload sets it)
};

/// What a workload function reports itself; the runner adds the allocator's figures.
struct workload_counts {
  std::int64_t ops = 0;                ///< allocations + frees
  std::size_t peak_requested = 0;      ///< bytes
  std::int64_t replays = 0;            ///< graphloop: graph launches
  double replay_seconds = 0.0;         ///< graphloop: time of the launches and the final synchronize
};

struct workload_result {
  double seconds = 0.0;
  std::int64_t ops = 0;
  std::size_t peak_requested = 0;
  std::size_t peak_allocated = 0;
  std::size_t peak_reserved = 0;
  std::int64_t device_mallocs = 0;
  std::int64_t replays = 0;            ///< graphloop
  double seconds_per_replay = 0.0;     ///< graphloop
  std::string leak = "ok";
  std::string error;
  std::string unsupported;             ///< non-empty: the workload cannot run on this backend (why)
};

using workload_fn = workload_counts (*)(allocator& alloc, const driver_instance& inst, const workload_params& params);

struct workload_def {
  std::string name;
  std::string description;
  workload_fn run = nullptr;  ///< nullptr: not available yet
  std::string unavailable_reason;
  /// When set: "" if the backend (registry name) can run the workload, else why not.
  std::string (*unsupported)(const std::string& backend) = nullptr;
  /// When set: checks the parameters before any backend runs. @throws usage_error
  void (*validate)(const workload_params& params) = nullptr;
};

[[nodiscard]] const std::vector<workload_def>& workload_list();
/// @throws usage_error for an unknown or unavailable name
[[nodiscard]] const workload_def& find_workload(const std::string& name);

/// Checks `params` for `def` (its `validate`), once, before any backend runs (Note [Bad input stops
/// the run once], isolated_run.cpp). @throws usage_error saying what to change
void validate_workload(const workload_def& def, const workload_params& params);

/// Runs `def` once on a fresh allocator of `spec`. Never throws for a backend failure.
[[nodiscard]] workload_result run_workload(const workload_def& def, const backend_spec& spec,
                                           const driver_choice& choice, const workload_params& params);

workload_counts workload_random(allocator& alloc, const driver_instance& inst, const workload_params& params);
/// random: every request must fit under the live cap. @throws usage_error
void validate_random(const workload_params& params);
workload_counts workload_multistream(allocator& alloc, const driver_instance& inst, const workload_params& params);
workload_counts workload_trainloop(allocator& alloc, const driver_instance& inst, const workload_params& params);
workload_counts workload_graphloop(allocator& alloc, const driver_instance& inst, const workload_params& params);
/// Why `backend` cannot run graphloop ("" = it can): the peers that cannot be captured.
[[nodiscard]] std::string graphloop_unsupported_reason(const std::string& backend);

}  // namespace streampool::bench
