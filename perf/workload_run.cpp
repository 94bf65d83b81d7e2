// workload_run.cpp — the list of workloads and run_workload(): a fresh allocator per run, peaks
// from a reset at the start, the time of the workload body, then the leak check. A backend the
// workload does not support (graphloop: the peers that cannot be captured) is not run.
#include <chrono>

#include "workloads.hpp"

namespace streampool::bench {

const std::vector<workload_def>& workload_list() {
  static const std::vector<workload_def> list = {
      {"random", "RMM random_allocations: --count allocations of uniform sizes in [1 B, --max-size], "
                 "73% allocation probability, frees of random live blocks, live bytes capped", workload_random, {}, nullptr,
                 validate_random},
      {"multistream", "a producer stream hands buffers to --streams - 1 consumer streams (record_stream) "
                      "and frees them at once; consumers finish in turn", workload_multistream, {}, nullptr},
      {"trainloop", "training steps: weights, then per step activations of varying batch x sequence "
                    "allocated in layer order and freed in reverse, optimizer temporaries", workload_trainloop, {}, nullptr},
      {"graphloop", "--graphs shape buckets, each step (--count buffers of varying sizes up to --max-size, "
                    "allocated and freed) warmed up, captured into a graph sharing one private pool, then "
                    "--steps replays in turn", workload_graphloop, {}, graphloop_unsupported_reason},
  };
  return list;
}

const workload_def& find_workload(const std::string& name) {
  std::string known;
  for (const workload_def& def : workload_list()) {
    if (def.name == name) {
      if (def.run == nullptr) throw usage_error("workload '" + name + "' is " + def.unavailable_reason);
      return def;
    }
    known += (known.empty() ? "" : ", ") + def.name;
  }
  throw usage_error("unknown workload '" + name + "'; known: " + known);
}

void validate_workload(const workload_def& def, const workload_params& params) {
  if (def.validate != nullptr) def.validate(params);
}

workload_result run_workload(const workload_def& def, const backend_spec& spec, const driver_choice& choice,
                             const workload_params& params) {
  workload_result result;
  if (def.unsupported != nullptr) {
    result.unsupported = def.unsupported(spec.name);
    if (!result.unsupported.empty()) {
      result.leak = "-";
      return result;
    }
  }
  workload_params run_params = params;
  run_params.backend = spec.name;
  try {
    const driver_instance inst = make_driver(choice);
    std::unique_ptr<allocator> alloc = make_backend(spec, inst.drv);
    alloc->reset_peak_stats(0);
    const std::int64_t mallocs_before = alloc->stats(0).num_device_alloc;
    const auto start = std::chrono::steady_clock::now();
    const workload_counts counts = def.run(*alloc, inst, run_params);
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const memory_stats stats = alloc->stats(0);
    result.ops = counts.ops;
    result.peak_requested = counts.peak_requested;
    result.peak_allocated = static_cast<std::size_t>(stats.allocated_bytes[0].peak);
    result.peak_reserved = static_cast<std::size_t>(stats.reserved_bytes[0].peak);
    result.device_mallocs = stats.num_device_alloc - mallocs_before;
    result.replays = counts.replays;
    if (counts.replays > 0) result.seconds_per_replay = counts.replay_seconds / static_cast<double>(counts.replays);
    result.leak = leak_check(*alloc, 0);
    alloc->empty_cache();
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

}  // namespace streampool::bench
