// replay_run.hpp — one trace replay through one allocator, shared by `replay` and `tune`: wraps
// streampool::replay_trace with stats sampling (for --plot), progress, timing and the leak check.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "streampool/replay.hpp"

namespace streampool::bench {

struct replay_sample {
  double event = 0;      ///< index of the event
  double allocated = 0;  ///< allocated_bytes.all.current
  double reserved = 0;   ///< reserved_bytes.all.current
};

struct replay_outcome {
  replay_result result;
  std::vector<replay_sample> samples;  ///< empty unless sampling was asked for
  std::string leak = "ok";
  std::string error;                   ///< non-empty: the allocator failed (e.g. not implemented, OOM)
};

using allocator_maker = std::function<std::unique_ptr<allocator>(const driver_instance&)>;

/// Replays `events` through a fresh allocator from `make` on `inst`. With `samples` > 0, stats are
/// read about that many times along the trace. `progress(done, total)` is called from this thread.
/// Never throws for an allocator failure: the outcome carries the error.
[[nodiscard]] replay_outcome run_replay(const allocator_maker& make, const driver_instance& inst,
                                        const std::vector<trace_event>& events, std::size_t samples,
                                        const std::function<void(std::size_t, std::size_t)>& progress);

/// What the trace itself says, without replaying it: peak requested (from its own sizes) and what
/// PyTorch reserved while recording (the sum of the segment_alloc sizes, and their count).
[[nodiscard]] replay_result recorded_figures(const std::vector<trace_event>& events);

/// Reads a trace file (read_trace); a missing, empty or malformed
/// file is bad input. @throws usage_error naming the file (and line)
[[nodiscard]] std::vector<trace_event> load_trace(const std::string& path, const common_options& opts);

}  // namespace streampool::bench
