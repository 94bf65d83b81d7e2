// replay_run.cpp — run_replay(): replay_trace with a sampling progress callback.
//
// Note [Sampling stats during a replay]
// replay_trace offers one hook, a progress callback every `progress_every` events. The chart of
// reserved vs allocated over time needs the allocator's stats along the way, so the callback
// captures the allocator and reads stats() each time it is called: with progress_every =
// events / samples that gives `samples` points. stats() costs microseconds; a few thousand
// samples add milliseconds to a replay, which is within its run-to-run noise. Between samples a
// short peak can be missed by the chart (never by the reported peaks, which come from the
// allocator's own peak statistics).
#include "replay_run.hpp"

#include <algorithm>
#include <string_view>

#include "backend_registry.hpp"
#include "sim_pool_estimate.hpp"

namespace streampool::bench {

replay_outcome run_replay(const allocator_maker& make, const driver_instance& inst,
                          const std::vector<trace_event>& events, std::size_t samples,
                          const std::function<void(std::size_t, std::size_t)>& progress) {
  replay_outcome outcome;
  try {
    std::unique_ptr<allocator> alloc = make(inst);
    replay_options options;
    options.sim = inst.sim;
    // Replayed as on a real device (Note [Replaying delayed frees]); on the sim an estimate.
    options.defer_delayed_frees = uses_stream_ordered_pool(*alloc);
    outcome.estimate = inst.sim != nullptr && options.defer_delayed_frees;
    const std::size_t total = std::max<std::size_t>(events.size(), 1);
    options.progress_every = samples > 0 ? std::max<std::size_t>(1, total / samples)
                                         : std::max<std::size_t>(1000, total / 100);
    options.progress = [&](std::size_t done, std::size_t all) {
      if (samples > 0) {
        const memory_stats stats = alloc->stats(0);
        outcome.samples.push_back({static_cast<double>(done), static_cast<double>(stats.allocated_bytes[0].current),
                                   static_cast<double>(stats.reserved_bytes[0].current)});
      }
      if (progress) progress(done, all);
    };
    outcome.result = replay_trace(*alloc, events, options);
    outcome.leak = leak_check(*alloc, 0);
    alloc->empty_cache();
  } catch (const std::exception& e) {
    // An inconsistent trace (replay_trace: "trace line N: ...") is bad input, not a backend failure.
    if (std::string_view(e.what()).rfind("trace line ", 0) == 0) throw usage_error(e.what());
    outcome.error = e.what();
  }
  return outcome;
}

/// Reads the trace (one line on stderr unless --quiet), turning a missing or malformed file into bad input (exit status 2).
std::vector<trace_event> load_trace(const std::string& path, const common_options& opts) {
  if (path.empty()) throw usage_error("--trace FILE is required");
  info(opts, "reading " + path);
  try {
    std::vector<trace_event> events = read_trace(path);
    if (events.empty()) throw usage_error("--trace: '" + path + "' holds no events");
    return events;
  } catch (const error& e) {
    throw usage_error(std::string("--trace: ") + e.what());
  }
}

}  // namespace streampool::bench
