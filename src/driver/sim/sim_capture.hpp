// sim_capture.hpp (internal) — the simulated device's capture rules (capture_model): capture
// state on the stream records of a stream_model, the count of strict captures active, capture
// ids, the refusal (and invalidation) of calls illegal in capture, and the per-thread capture
// mode. See Note [Sim capture sequences] and Note [Relaxed uncaptured calls] in sim_capture.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "driver/sim/sim_common.hpp"
#include "driver/sim/sim_streams.hpp"

namespace streampool::sim {

class capture_model {
 public:
  explicit capture_model(stream_model& streams) noexcept : streams_(streams) {}

  /// Strict (not relaxed-mode) captures active on some stream.
  [[nodiscard]] int active() const noexcept { return active_; }
  /// A fresh id for a capture begun with stream_begin_capture.
  [[nodiscard]] std::uint64_t next_id() noexcept { return next_id_++; }
  /// Puts `stream` into capture `id` (status active).
  void enter(std::uint32_t stream, std::uint64_t id, bool strict, bool begun, bool origin) noexcept;
  /// Takes `stream` out of its capture (status none).
  void leave(std::uint32_t stream) noexcept;
  /// Result of a call that is illegal while a strict capture is active: invalidates every capture
  /// begun with stream_begin_capture, as CUDA does, and returns status::illegal_in_capture.
  [[nodiscard]] drv_result refuse() noexcept;
  /// True when a call that is unsafe in capture (cudaMalloc) must be refused: a strict capture is
  /// active and the calling thread is not in relaxed capture mode.
  [[nodiscard]] bool refuses_unsafe() const noexcept;
  /// True when a stream-ordered allocation call on `stream` must be refused: a strict capture is
  /// active, `stream` is not capturing, and the calling thread is not in relaxed capture mode
  /// (Note [Relaxed uncaptured calls]).
  [[nodiscard]] bool refuses_uncaptured(std::uint32_t stream) const noexcept;
  /// stream_wait_event(waiter, event) inside a capture: joins `waiter` to the event's capture and
  /// marks the recording stream joined up to the event.
  /// @throws std::bad_alloc (run() turns it into a failed call)
  void join_on_wait(std::uint32_t waiter, const event_rec& event);
  /// cudaStreamGetCaptureInfo's dependencies of `stream` (Note [Sim capture graph]).
  [[nodiscard]] drv_result dependencies(std::uint32_t stream, std::vector<graph_node_t>* out) const;
  /// cudaGraphNodeGetDependencies of a node of an active capture (Note [Sim capture graph]).
  [[nodiscard]] drv_result node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) const;
  /// Sets the calling thread's capture mode; returns the previous one.
  static capture_mode exchange_thread_mode(capture_mode mode) noexcept;

 private:
  /// Adds to `out` the nodes standing for position `target` of `stream` in its capture.
  void resolve(std::uint32_t stream, std::uint64_t target, std::vector<graph_node_t>* out) const;
  stream_model& streams_;
  int active_ = 0;
  std::uint64_t next_id_ = first_capture_id;
};

}  // namespace streampool::sim
