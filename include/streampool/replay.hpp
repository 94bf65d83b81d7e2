// streampool/replay.hpp — reading allocation traces (the CSV format, plain or gzip, also what
// trace_to_csv() writes; and PyTorch's own memory snapshot pickles, from
// torch.cuda.memory._dump_snapshot()) and replaying them through an allocator, to measure peak
// reserved / allocated and device mallocs for a real program's allocation sequence.
// docs/trace-format.md describes both formats.
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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
/// Reads a trace file of either format (read_trace_file() with the default options) and returns
/// its events. @throws error as read_trace_file()
[[nodiscard]] STREAMPOOL_API std::vector<trace_event> read_trace(const std::string& path);

/// How read_trace_file() reads a file.
struct STREAMPOOL_API trace_read_options {
  int device = 0;  ///< PyTorch snapshots: the device whose trace is read (a snapshot has one per device)
};

/// A trace file as read: its events and what else the file said.
struct STREAMPOOL_API trace_file {
  std::vector<trace_event> events;      ///< for a snapshot, `line` is the 1-based index in its device trace
  std::string format;                   ///< "csv" or "pytorch-snapshot"
  std::vector<std::string> warnings;    ///< e.g. a recording that starts mid-run, and what to do about it
  int devices = 1;                      ///< devices in a snapshot (1 for CSV)
  bool has_allocator_settings = false;  ///< the snapshot says which config PyTorch ran with
  std::string allocator_settings;       ///< that config, PYTORCH_CUDA_ALLOC_CONF syntax ("" = PyTorch's defaults)
};

/// Reads a trace file, its format detected by content, whatever its name: a pickle (first byte
/// 0x80) is a PyTorch memory snapshot, anything else CSV; either may be gzip-compressed. A snapshot
/// is read as data only, never executed, and streamed: stack frames and segments are skipped
/// while reading, so memory follows the events of the chosen device, not the file size.
/// @throws error (one message naming the file) when it is missing, unreadable, truncated or
///         malformed; a pickle that would import or call code; a snapshot without an allocation
///         trace (recording was off), without the device asked for, or with an unknown action
[[nodiscard]] STREAMPOOL_API trace_file read_trace_file(const std::string& path, const trace_read_options& options = {});
/// Parses a PyTorch memory snapshot pickle held in memory (`source` names it in messages).
/// @throws error as read_trace_file()
[[nodiscard]] STREAMPOOL_API trace_file parse_snapshot(std::string_view bytes, std::string_view source,
                                        const trace_read_options& options = {});

/// The streams a replay creates: one per stream value recorded in the trace, and "holder"
/// streams for delayed frees on the sim driver. Destroying it destroys them.
///
/// An allocator keeps using a stream after the replay: its cached blocks belong to the stream
/// they were allocated on, and releasing them (empty_cache, the allocator's destructor)
/// synchronises that stream before unmapping expandable pages, as PyTorch does. So the streams
/// must outlive every use the allocator makes of them: create the replay_streams before the
/// allocator (so it is destroyed after it), or call empty_cache() before destroying it. On the
/// real driver a destroyed stream's handle is not reported as invalid but fails the call with
/// cudaErrorDeviceUninitialized or crashes; see Note [Replay stream lifetime] in trace_replay.cpp.
class STREAMPOOL_API replay_streams {
 public:
  /// @throws nothing; streams are created on first use, on `device` of `drv`
  replay_streams(driver& drv, int device) noexcept : driver_(drv), device_(device) {}
  ~replay_streams();
  replay_streams(const replay_streams&) = delete;
  replay_streams& operator=(const replay_streams&) = delete;

  /// The stream standing for the recorded value `value` (0: the legacy default stream).
  /// @throws cuda_error when a stream cannot be created
  [[nodiscard]] stream_t recorded(std::uint64_t value);
  /// A holder stream for a delayed free (sim only), from the idle ones or a new one.
  /// @throws cuda_error when a stream cannot be created
  [[nodiscard]] stream_t take_holder();
  void give_back_holder(stream_t stream) { idle_holders_.push_back(stream); }
  [[nodiscard]] driver& device_driver() const noexcept { return driver_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Streams created so far (recorded + holders).
  [[nodiscard]] std::size_t created() const noexcept { return recorded_.size() + holders_.size(); }

 private:
  [[nodiscard]] stream_t create();
  driver& driver_;
  int device_;
  std::vector<std::pair<std::uint64_t, stream_t>> recorded_;  ///< in creation order (destroyed in it)
  std::unordered_map<std::uint64_t, stream_t> recorded_index_;  ///< recorded_ by value: 20,000 streams are a case
  std::vector<stream_t> holders_;
  std::vector<stream_t> idle_holders_;
};

struct STREAMPOOL_API replay_options {
  /// When a driver other than the sim is used, delayed frees (free_completed later than right
  /// after free_requested) are replayed by deferring the free; with a sim driver they are
  /// replayed faithfully with record_stream on a holder stream completed at free_completed.
  sim_driver* sim = nullptr;
  /// Defer delayed frees on the sim driver too, as a replay on a real device does. For
  /// stream-ordered pool backends (cudaMallocAsync, async-raw) the holder-stream replay lets the
  /// freeing stream reuse the block at once (CUDA's stream order allows it) while a real-device
  /// replay cannot; deferring makes the sim's figures comparable with the device's.
  bool defer_delayed_frees = false;
  /// Called every `progress_every` events with (done, total); empty = no progress.
  std::function<void(std::size_t, std::size_t)> progress;
  std::size_t progress_every = 10000;
  /// The streams to replay on (same driver and device as the allocator). nullptr: replay_trace
  /// makes its own and, before destroying them, empties the allocator's cache (so nothing cached
  /// refers to a destroyed stream); pass one that outlives the allocator to keep the cache.
  replay_streams* streams = nullptr;
};

struct STREAMPOOL_API replay_result {
  std::size_t events = 0;             ///< events in the trace
  std::size_t replayed = 0;           ///< alloc + free events driven through the allocator
  std::size_t skipped_frees = 0;      ///< frees of addresses allocated before recording started
  std::size_t peak_requested = 0;     ///< bytes, from the trace's own sizes
  std::size_t peak_allocated = 0;     ///< allocated_bytes.all.peak during the replay
  std::size_t peak_reserved = 0;      ///< reserved_bytes.all.peak during the replay
  std::int64_t device_mallocs = 0;    ///< num_device_alloc during the replay
  std::int64_t cross_stream_reuses = 0;  ///< num_cross_stream_reuses during the replay (cross_stream_reuse:True)
  std::int64_t cross_stream_waits = 0;   ///< num_cross_stream_waits during the replay
  std::int64_t moved_pages = 0;          ///< num_moved_pages during the replay (expandable segments)
  std::int64_t fence_host_waits = 0;     ///< num_fence_host_waits during the replay
  std::size_t recorded_segment_bytes = 0;  ///< sum of the trace's segment_alloc sizes (what PyTorch reserved)
  std::size_t recorded_segment_events = 0;
  double seconds = 0.0;               ///< host time of the replay loop
};

/// Replays `events` through `alloc` on its current device, freeing everything still live at the
/// end. Peaks are measured from a reset at the start. Without options.streams the allocator's
/// cache is emptied at the end (see replay_options::streams).
/// @throws error for an inconsistent trace (double alloc of a live address, ...), with the line
[[nodiscard]] STREAMPOOL_API replay_result replay_trace(allocator& alloc, const std::vector<trace_event>& events,
                                         const replay_options& options = {});

}  // namespace streampool
