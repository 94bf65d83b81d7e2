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
#include <optional>
#include <string_view>
#include <unordered_map>

#include "backend_registry.hpp"
#include "sim_pool_estimate.hpp"

namespace streampool::bench {

replay_outcome run_replay(const allocator_maker& make, const driver_instance& inst,
                          const std::vector<trace_event>& events, std::size_t samples,
                          const std::function<void(std::size_t, std::size_t)>& progress) {
  replay_outcome outcome;
  try {
    // Declared before the allocator, so destroyed after it: Note [Replay stream lifetime]
    // (src/replay/trace_replay.cpp). The allocator synchronises these streams when it releases
    // its cache (empty_cache below, and its destructor).
    std::optional<replay_streams> streams;
    std::unique_ptr<allocator> alloc = make(inst);
    int device = 0;
    check(alloc->device_driver(), alloc->device_driver().get_device(&device), "replay: get_device");
    streams.emplace(alloc->device_driver(), device);
    replay_options options;
    options.sim = inst.sim;
    options.streams = &*streams;
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
  // On the sim, a call given a destroyed stream is counted (Note [Sim destroyed streams]): the
  // real driver fails it or crashes, so a replay that made one is a failed replay.
  if (inst.sim != nullptr && inst.sim->destroyed_stream_uses() != 0 && outcome.error.empty()) {
    outcome.error = "the replay used a destroyed stream " + std::to_string(inst.sim->destroyed_stream_uses()) +
                    " time(s) (Note [Replay stream lifetime]): on a GPU this fails or crashes";
  }
  return outcome;
}

// Note [PyTorch's recorded peak reserved]
// A trace recorded from PyTorch carries what its allocator did with device memory: segment_alloc /
// segment_free (cudaMalloc / cudaFree of a segment) and, with expandable segments, segment_map /
// segment_unmap of pages. The row "pytorch (recorded)" first showed the sum of the segment_alloc
// sizes, which overstates the peak of a run that freed a segment and allocated again (two 20 MiB
// segments one after the other: 40 MiB shown, 20 MiB ever held). Its peak reserved is now the
// running peak of what was held: + segment_alloc and segment_map, - segment_free and segment_unmap.
// A segment_free of a segment allocated before recording started subtracts nothing (it was never
// added), and the held total never goes below zero (an unmap of pages mapped before recording).
recorded_run recorded_figures(const std::vector<trace_event>& events) {
  recorded_run r;
  std::unordered_map<std::uint64_t, std::uint64_t> live;      // address -> requested bytes
  std::unordered_map<std::uint64_t, std::uint64_t> segments;  // address -> segment bytes
  std::size_t requested = 0, reserved = 0;
  for (const trace_event& e : events) {
    switch (e.action) {
      case trace_action::segment_alloc:
        segments[e.address] = e.size;
        reserved += e.size;
        r.segment_bytes += e.size;
        ++r.segment_allocs;
        break;
      case trace_action::segment_map:
        reserved += e.size;
        ++r.segment_maps;
        break;
      case trace_action::segment_free:
        if (const auto it = segments.find(e.address); it != segments.end()) {
          reserved -= std::min<std::size_t>(reserved, it->second);
          segments.erase(it);
        }
        ++r.segment_frees;
        break;
      case trace_action::segment_unmap:
        reserved -= std::min<std::size_t>(reserved, e.size);
        ++r.segment_unmaps;
        break;
      case trace_action::alloc:
        if (e.size > 0 && live.emplace(e.address, e.size).second) {
          requested += e.size;
          r.peak_requested = std::max(r.peak_requested, requested);
        }
        break;
      case trace_action::free_requested:
        if (const auto it = live.find(e.address); it != live.end()) {
          requested -= it->second;
          live.erase(it);
        }
        break;
      default:
        break;
    }
    r.peak_reserved = std::max(r.peak_reserved, reserved);
  }
  return r;
}

}  // namespace streampool::bench
