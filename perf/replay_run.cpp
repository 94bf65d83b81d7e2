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

replay_result recorded_figures(const std::vector<trace_event>& events) {
  replay_result r;
  r.events = events.size();
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  std::size_t requested = 0;
  for (const trace_event& e : events) {
    if (e.action == trace_action::segment_alloc) {
      r.recorded_segment_bytes += e.size;
      ++r.recorded_segment_events;
    } else if (e.action == trace_action::alloc && e.size > 0 && live.emplace(e.address, e.size).second) {
      requested += e.size;
      r.peak_requested = std::max(r.peak_requested, requested);
    } else if (e.action == trace_action::free_requested) {
      if (const auto it = live.find(e.address); it != live.end()) {
        requested -= it->second;
        live.erase(it);
      }
    }
  }
  return r;
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
