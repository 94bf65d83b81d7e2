// sim_streams.hpp (internal) — the simulated device's streams and events (stream_model): fake
// handles, the submitted / completed work counters and wait dependencies that model progress
// (Note [Sim completion model] in sim_streams.cpp), the default streams (legacy per device,
// per-thread per thread and device) and each thread's current device. Capture state lives on the
// stream records but its rules are capture_model's (sim_capture.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "driver/sim/sim_common.hpp"

namespace streampool::sim {

struct wait_dep {
  std::uint64_t after;   ///< the waiting stream's items numbered > after wait for the dependency
  std::uint32_t stream;  ///< dependency: `stream` must complete up to `target`
  std::uint64_t target;
};

struct stream_rec {
  int device = 0;
  bool alive = true;
  bool builtin = false;  ///< a default stream (legacy or per-thread): no handle, never destroyed
  capture_status capture = capture_status::none;
  std::uint64_t capture_id = 0;
  // Capture sequences (Note [Sim capture sequences] in sim_capture.cpp):
  bool strict = true;    ///< while active, counts in capture_model's active count (not a relaxed-mode capture)
  bool begun = false;    ///< part of a capture from stream_begin_capture (not scripted)
  bool origin = false;   ///< the stream that began it
  std::uint64_t joined_through = 0;  ///< items up to this one are joined back into the capture
  std::uint64_t capture_base = 0;    ///< items after this one were captured (Note [Sim capture graph])
  std::vector<wait_dep> capture_waits;  ///< waits on events of the same capture, while capturing
  std::uint64_t submitted = 0;  ///< work items submitted so far
  std::uint64_t completed = 0;  ///< work items completed so far (<= submitted)
  std::vector<wait_dep> waits;
};

struct event_rec {
  int device = 0;
  bool alive = true;
  std::uint32_t stream = no_stream;  ///< no_stream: never recorded (complete)
  std::uint64_t target = 0;
  std::uint64_t capture_id = 0;  ///< recorded on a stream in an active capture sequence
};

class stream_model {
 public:
  /// `serial` identifies the sim instance in the per-thread data (Note [Sim current device]).
  stream_model(std::uint64_t serial, bool eager) noexcept : serial_(serial), eager_(eager) {}

  /// Adds the next device and its legacy stream.
  void add_device();
  [[nodiscard]] std::uint32_t add_stream(int device, bool builtin);
  /// A new (never recorded) event of `device`.
  [[nodiscard]] event_t add_event(int device);

  /// Index of a live stream, or no_stream. nullptr and cudaStreamLegacy (1) are the legacy stream
  /// of `device` (the current device if < 0), cudaStreamPerThread (2) this thread's own one.
  [[nodiscard]] std::uint32_t find_stream(stream_t stream, int device = -1);
  [[nodiscard]] std::uint32_t find_event(event_t event) const noexcept;
  /// The failure of a call given `stream` when find_stream found no live stream: a stream that was
  /// destroyed is status::other (and counted), anything else status::invalid_value.
  /// See Note [Sim destroyed streams].
  [[nodiscard]] drv_result failure(stream_t stream) noexcept;
  [[nodiscard]] std::uint64_t destroyed_uses() const noexcept { return destroyed_uses_; }

  /// Submits one work item to `stream`; returns its number.
  std::uint64_t submit(std::uint32_t stream) noexcept;
  /// Later items of `waiter` wait for `stream` up to item `target` (nothing if that is done).
  void wait(std::uint32_t waiter, std::uint32_t stream, std::uint64_t target);
  /// Completes `stream` up to item `target` (and, first, the work it waits on).
  void complete_to(std::uint32_t stream, std::uint64_t target);
  void complete_stream(std::uint32_t stream) { complete_to(stream, streams_[stream].submitted); }
  void complete_device(int device);
  void complete_all();
  [[nodiscard]] bool done(std::uint32_t stream, std::uint64_t target) const noexcept {
    return streams_[stream].completed >= target;
  }
  [[nodiscard]] bool eager() const noexcept { return eager_; }
  /// Eager: submission completes at once; switching to eager completes everything.
  void set_eager(bool eager);

  [[nodiscard]] int current_device() const noexcept;
  void set_current_device(int device);

  [[nodiscard]] stream_rec& operator[](std::uint32_t index) noexcept { return streams_[index]; }
  [[nodiscard]] const stream_rec& operator[](std::uint32_t index) const noexcept { return streams_[index]; }
  [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(streams_.size()); }
  [[nodiscard]] std::vector<stream_rec>& records() noexcept { return streams_; }
  [[nodiscard]] const std::vector<stream_rec>& records() const noexcept { return streams_; }
  [[nodiscard]] event_rec& event(std::uint32_t index) noexcept { return events_[index]; }

 private:
  /// This thread's per-thread default stream on `device` (created on first use).
  [[nodiscard]] std::uint32_t per_thread_stream(int device);

  std::uint64_t serial_;
  bool eager_;
  std::vector<stream_rec> streams_;
  std::vector<event_rec> events_;
  std::vector<std::uint32_t> legacy_;  ///< by device
  std::uint64_t destroyed_uses_ = 0;   ///< calls given a destroyed stream (Note [Sim destroyed streams])
};

}  // namespace streampool::sim
