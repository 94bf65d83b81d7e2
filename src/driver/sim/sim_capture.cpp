// sim_capture.cpp — the simulated device's capture rules (capture_model): which streams capture,
// in which sequence, how side streams join through events, which calls a capture forbids (and
// the invalidation they cause), and each thread's capture mode. The driver calls that begin and
// end captures are graph_calls' (sim_graph_calls.cpp).
#include <algorithm>
#include <utility>

#include "driver/sim/sim_capture.hpp"

namespace streampool::sim {

// Note [Sim capture sequences]
// stream_begin_capture puts a created (or per-thread default) stream into a new capture with an
// id from a counter starting at 2^32 (scripted set_capture ids are small). Like CUDA:
//  - an event recorded on a capturing stream carries the capture; a stream that waits on it
//    joins that capture (same id, status active), and the recording stream counts as joined
//    back up to the event's item;
//  - stream_end_capture must be called on the stream that began the capture; it ends the capture
//    on every stream of the sequence, and fails (no graph) if the sequence was invalidated or a
//    side stream has work after the last item another stream waited on ("unjoined");
//  - a call that is illegal during capture (Note in driver.md "Capture") invalidates every
//    sequence begun here, so ending it fails: a test that ends a capture successfully also proves
//    nothing illegal was issued meanwhile.
// Modes: global and thread_local are both modelled as global (stricter than CUDA for
// thread_local: other threads' unsafe calls are refused too); a relaxed capture forbids nothing.
// Simplification: "joined back" is not checked transitively to the origin stream.

void capture_model::enter(std::uint32_t stream, std::uint64_t id, bool strict, bool begun, bool origin) noexcept {
  stream_rec& rec = streams_[stream];
  rec.capture = capture_status::active;
  rec.capture_id = id;
  rec.strict = strict;
  rec.begun = begun;
  rec.origin = origin;
  rec.joined_through = rec.submitted;
  rec.capture_base = rec.submitted;
  rec.capture_waits.clear();
  active_ += int(strict);
}

void capture_model::leave(std::uint32_t stream) noexcept {
  stream_rec& rec = streams_[stream];
  active_ -= int(rec.capture == capture_status::active && rec.strict);
  rec.capture = capture_status::none;
  rec.capture_id = 0;
  rec.capture_waits.clear();
  rec.strict = true;
  rec.begun = false;
  rec.origin = false;
}

drv_result capture_model::refuse() noexcept {
  for (stream_rec& rec : streams_.records()) {
    if (rec.capture == capture_status::active && rec.begun && rec.strict) {
      rec.capture = capture_status::invalidated;
      --active_;
    }
  }
  return fail(status::illegal_in_capture);
}

// Note [Relaxed uncaptured calls]
// Seen on the H200 (CUDA 13.0, scripts/probes/capture_rules_probe.cpp): while a thread has a
// global or thread-local capture open, cudaMallocAsync / cudaFreeAsync on a stream that is NOT
// capturing (a created stream or the legacy one) fail with cudaErrorStreamCaptureUnsupported and
// invalidate the capture; the same calls with the thread in relaxed mode succeed and leave it
// active (cudaEventRecord on such a stream is fine either way). The sim models this for
// malloc_async and free_async: refused (invalidating, as CUDA does) while a strict capture is
// active, unless the stream itself captures or this thread exchanged its mode to relaxed; and for
// cudaMalloc, which is refused during a strict capture unless the thread is relaxed. The mode is
// per thread, as in CUDA, and starts global.
namespace {
thread_local capture_mode sim_thread_mode = capture_mode::global;
}  // namespace

capture_mode capture_model::exchange_thread_mode(capture_mode mode) noexcept {
  std::swap(mode, sim_thread_mode);
  return mode;
}

bool capture_model::refuses_unsafe() const noexcept {
  return active_ > 0 && sim_thread_mode != capture_mode::relaxed;
}

bool capture_model::refuses_uncaptured(std::uint32_t stream) const noexcept {
  return active_ > 0 && streams_[stream].capture != capture_status::active &&
         sim_thread_mode != capture_mode::relaxed;
}


void capture_model::join_on_wait(std::uint32_t waiter, const event_rec& event) {
  stream_rec& recorder = streams_[event.stream];
  if (recorder.capture != capture_status::active || recorder.capture_id != event.capture_id) {
    return;  // that capture is over: an ordinary wait
  }
  recorder.joined_through = std::max(recorder.joined_through, event.target);
  stream_rec& rec = streams_[waiter];
  if (rec.capture == capture_status::none && recorder.begun) {
    enter(waiter, event.capture_id, recorder.strict, /*begun=*/true, /*origin=*/false);
  }
  if (rec.capture == capture_status::active && rec.capture_id == event.capture_id && waiter != event.stream) {
    rec.capture_waits.push_back({rec.submitted, event.stream, event.target});
  }
}

// Note [Sim capture graph]
// The graph a capture records, as far as its dependencies go: every item submitted to a stream
// while it captures (event records, memsets, the sim's kernels) is a node, named by its stream and
// item number; item k depends on item k-1 of its stream (when that one is captured too) and on
// the event positions its stream waited for between k-1 and k (capture_waits). A position that is
// no captured item of its stream (an event recorded before any work of the capture) stands for
// what that stream itself depended on there. capture_dependencies gives these for the stream's
// next item. Enough for what the allocator asks: whether one node is an ancestor of another.
namespace {

constexpr unsigned node_item_bits = 40;

graph_node_t node_of(std::uint32_t stream, std::uint64_t item) noexcept {
  return reinterpret_cast<graph_node_t>(((static_cast<std::uintptr_t>(stream) + 1) << node_item_bits) |
                                        static_cast<std::uintptr_t>(item));
}

}  // namespace

void capture_model::resolve(std::uint32_t stream, std::uint64_t target, std::vector<graph_node_t>* out) const {
  const stream_rec& rec = streams_[stream];
  if (rec.capture != capture_status::active) return;
  if (target > rec.capture_base) {
    out->push_back(node_of(stream, target));
    return;
  }
  for (const wait_dep& w : rec.capture_waits) {
    if (w.after == target) resolve(w.stream, w.target, out);
  }
}

drv_result capture_model::dependencies(std::uint32_t stream, std::vector<graph_node_t>* out) const {
  out->clear();
  const stream_rec& rec = streams_[stream];
  if (rec.capture != capture_status::active) return {};
  if (rec.submitted > rec.capture_base) out->push_back(node_of(stream, rec.submitted));
  for (const wait_dep& w : rec.capture_waits) {
    if (w.after == rec.submitted) resolve(w.stream, w.target, out);
  }
  return {};
}

drv_result capture_model::node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) const {
  const auto bits = reinterpret_cast<std::uintptr_t>(node);
  const std::uintptr_t stream_plus_one = bits >> node_item_bits;
  const std::uint64_t item = bits & ((std::uintptr_t{1} << node_item_bits) - 1);
  if (stream_plus_one == 0 || stream_plus_one > streams_.size()) return fail(status::invalid_value);
  const auto stream = static_cast<std::uint32_t>(stream_plus_one - 1);
  const stream_rec& rec = streams_[stream];
  if (rec.capture != capture_status::active || item <= rec.capture_base || item > rec.submitted) {
    return fail(status::invalid_value);
  }
  out->clear();
  if (item - 1 > rec.capture_base) out->push_back(node_of(stream, item - 1));
  for (const wait_dep& w : rec.capture_waits) {
    if (w.after == item - 1) resolve(w.stream, w.target, out);
  }
  return {};
}

}  // namespace streampool::sim
