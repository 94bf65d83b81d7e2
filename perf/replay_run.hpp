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
  bool estimate = false;               ///< peak reserved from the sim's pool model (sim_pool_estimate.hpp)
};

using allocator_maker = std::function<std::unique_ptr<allocator>(const driver_instance&)>;

/// Replays `events` through a fresh allocator from `make` on `inst`. With `samples` > 0, stats are
/// read about that many times along the trace. `progress(done, total)` is called from this thread.
/// Never throws for an allocator failure: the outcome carries the error.
[[nodiscard]] replay_outcome run_replay(const allocator_maker& make, const driver_instance& inst,
                                        const std::vector<trace_event>& events, std::size_t samples,
                                        const std::function<void(std::size_t, std::size_t)>& progress);

/// What the trace itself says about the recorded run, without replaying it.
struct recorded_run {
  std::size_t peak_requested = 0;  ///< from the trace's own alloc / free sizes
  std::size_t peak_reserved = 0;   ///< PyTorch's peak reserved: Note [PyTorch's recorded peak reserved]
  std::size_t segment_bytes = 0;   ///< the sum of the segment_alloc sizes (not a peak)
  std::size_t segment_allocs = 0;
  std::size_t segment_frees = 0;
  std::size_t segment_maps = 0;    ///< expandable segments: pages mapped / unmapped
  std::size_t segment_unmaps = 0;
  /// True when the trace holds any segment event (a recording of PyTorch's allocator).
  [[nodiscard]] bool has_segments() const noexcept { return segment_allocs + segment_maps > 0; }
};

/// Peak requested and PyTorch's recorded peak reserved (running reserved from segment_alloc /
/// segment_map and segment_free / segment_unmap) of `events`.
[[nodiscard]] recorded_run recorded_figures(const std::vector<trace_event>& events);

}  // namespace streampool::bench
