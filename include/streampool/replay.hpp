// streampool/replay.hpp — reading allocation traces (the CSV format of shared/traces/README.md,
// plain or gzip; also what trace_to_csv() writes) and replaying them through an allocator, to
// measure peak reserved / allocated and device mallocs for a real program's allocation sequence.
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "streampool/allocator.hpp"
#include "streampool/stats.hpp"

namespace streampool {

class sim_driver;

/// One line of a trace file.
struct STREAMPOOL_API trace_event {
  trace_action action = trace_action::alloc;
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;  ///< the recorded stream handle value; 0 = default stream
  std::uint64_t time_us = 0;
  std::size_t line = 0;      ///< 1-based line number in the file
};

/// Parses CSV text with the header "action,addr,size,stream,time_us".
/// @throws error naming `source`, the line number and what is wrong
[[nodiscard]] STREAMPOOL_API std::vector<trace_event> parse_trace(std::istream& in, std::string_view source);
/// Reads a trace file; names ending in ".gz" are decompressed.
/// @throws error when the file is missing, unreadable or malformed (with the line number)
[[nodiscard]] STREAMPOOL_API std::vector<trace_event> read_trace(const std::string& path);

struct STREAMPOOL_API replay_options {
  /// When a driver other than the sim is used, delayed frees (free_completed later than right
  /// after free_requested) are replayed by deferring the free; with a sim driver they are
  /// replayed faithfully with record_stream on a holder stream completed at free_completed.
  sim_driver* sim = nullptr;
  /// Called every `progress_every` events with (done, total); empty = no progress.
  std::function<void(std::size_t, std::size_t)> progress;
  std::size_t progress_every = 10000;
};

struct STREAMPOOL_API replay_result {
  std::size_t events = 0;             ///< events in the trace
  std::size_t replayed = 0;           ///< alloc + free events driven through the allocator
  std::size_t skipped_frees = 0;      ///< frees of addresses allocated before recording started
  std::size_t peak_requested = 0;     ///< bytes, from the trace's own sizes
  std::size_t peak_allocated = 0;     ///< allocated_bytes.all.peak during the replay
  std::size_t peak_reserved = 0;      ///< reserved_bytes.all.peak during the replay
  std::int64_t device_mallocs = 0;    ///< num_device_alloc during the replay
  std::size_t recorded_segment_bytes = 0;  ///< sum of the trace's segment_alloc sizes (what PyTorch reserved)
  std::size_t recorded_segment_events = 0;
  double seconds = 0.0;               ///< host time of the replay loop
};

/// Replays `events` through `alloc` on its current device, freeing everything still live at the
/// end. Peaks are measured from a reset at the start.
/// @throws error for an inconsistent trace (double alloc of a live address, ...), with the line
[[nodiscard]] STREAMPOOL_API replay_result replay_trace(allocator& alloc, const std::vector<trace_event>& events,
                                         const replay_options& options = {});

}  // namespace streampool
