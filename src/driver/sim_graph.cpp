// sim_graph.cpp — the simulated device's stream capture and graphs: capture sequences begun with
// stream_begin_capture (unique ids, side streams joining through events, the joined-back check
// and invalidation at end), fake graphs and executables, and launches that submit one work item.
// The sim builds no real graph: what it checks is the bookkeeping that CUDA enforces.
#include <algorithm>
#include <utility>

#include "driver/sim_state.hpp"

namespace streampool {

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

void sim_driver::state::enter_capture(std::uint32_t stream, std::uint64_t id, bool strict, bool begun,
                                      bool origin) noexcept {
  sim::stream_rec& rec = streams_[stream];
  rec.capture = capture_status::active;
  rec.capture_id = id;
  rec.strict = strict;
  rec.begun = begun;
  rec.origin = origin;
  rec.joined_through = rec.submitted;
  active_captures_ += int(strict);
}

void sim_driver::state::leave_capture(std::uint32_t stream) noexcept {
  sim::stream_rec& rec = streams_[stream];
  active_captures_ -= int(rec.capture == capture_status::active && rec.strict);
  rec.capture = capture_status::none;
  rec.capture_id = 0;
  rec.strict = true;
  rec.begun = false;
  rec.origin = false;
}

drv_result sim_driver::state::refuse_in_capture() noexcept {
  for (sim::stream_rec& rec : streams_.records()) {
    if (rec.capture == capture_status::active && rec.begun && rec.strict) {
      rec.capture = capture_status::invalidated;
      --active_captures_;
    }
  }
  return sim::fail(status::illegal_in_capture);
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

bool sim_driver::state::refuses_unsafe() const noexcept {
  return active_captures_ > 0 && sim_thread_mode != capture_mode::relaxed;
}

bool sim_driver::state::refuses_uncaptured(std::uint32_t stream) const noexcept {
  return active_captures_ > 0 && streams_[stream].capture != capture_status::active &&
         sim_thread_mode != capture_mode::relaxed;
}

drv_result sim_driver::thread_exchange_capture_mode(capture_mode* mode) noexcept {
  if (mode == nullptr) return sim::fail(status::invalid_value);
  std::swap(*mode, sim_thread_mode);
  return drv_result{};
}

void sim_driver::state::join_on_wait(std::uint32_t waiter, const sim::event_rec& event) noexcept {
  sim::stream_rec& recorder = streams_[event.stream];
  if (recorder.capture != capture_status::active || recorder.capture_id != event.capture_id) {
    return;  // that capture is over: an ordinary wait
  }
  recorder.joined_through = std::max(recorder.joined_through, event.target);
  sim::stream_rec& rec = streams_[waiter];
  if (rec.capture == capture_status::none && recorder.begun) {
    enter_capture(waiter, event.capture_id, recorder.strict, /*begun=*/true, /*origin=*/false);
  }
}

// --- capture -------------------------------------------------------------------------------------

drv_result sim_driver::stream_begin_capture(stream_t stream, capture_mode mode) noexcept {
  return state_->run(counters_, driver_call::stream_begin_capture, [&] {
    const auto value = reinterpret_cast<std::uintptr_t>(stream);
    if (value == 0 || value == 1) {
      return sim::fail(status::illegal_in_capture);  // the legacy stream cannot be captured
    }
    const std::uint32_t index = state_->streams_.find_stream(stream);
    if (index == sim::no_stream) {
      return state_->streams_.failure(stream);
    }
    if (state_->streams_[index].capture != capture_status::none) {
      return sim::fail(status::illegal_in_capture);  // already capturing
    }
    const std::uint64_t id = state_->next_capture_id_++;
    state_->enter_capture(index, id, mode != capture_mode::relaxed, /*begun=*/true, /*origin=*/true);
    return drv_result{};
  });
}

drv_result sim_driver::stream_end_capture(stream_t stream, graph_t* out) noexcept {
  return state_->run(counters_, driver_call::stream_end_capture, [&] {
    *out = nullptr;
    const std::uint32_t index = state_->streams_.find_stream(stream);
    if (index == sim::no_stream) {
      return state_->streams_.failure(stream);
    }
    const sim::stream_rec origin = state_->streams_[index];
    if (origin.capture == capture_status::none || !origin.begun || !origin.origin) {
      return sim::fail(status::illegal_in_capture);  // not capturing, or not where it began
    }
    bool unjoined = false;
    for (std::uint32_t other = 0; other < state_->streams_.size(); ++other) {
      sim::stream_rec& rec = state_->streams_[other];
      if (rec.capture == capture_status::none || rec.capture_id != origin.capture_id || !rec.begun) {
        continue;
      }
      unjoined = unjoined || (other != index && rec.submitted > rec.joined_through);
      state_->leave_capture(other);
    }
    if (origin.capture == capture_status::invalidated || unjoined) {
      return sim::fail(status::illegal_in_capture);
    }
    *out = state_->graphs_.add_graph(origin.device);
    return drv_result{};
  });
}

// --- graphs --------------------------------------------------------------------------------------

drv_result sim_driver::graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept {
  return state_->run(counters_, driver_call::graph_instantiate, [&] {
    *out = nullptr;
    const sim::graph_book::graph_rec* rec = state_->graphs_.find_graph(graph);
    if (rec == nullptr) {
      return sim::fail(status::invalid_value);
    }
    *out = state_->graphs_.add_exec(rec->device, flags);
    return drv_result{};
  });
}

drv_result sim_driver::graph_launch(graph_exec_t exec, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::graph_launch, [&] {
    const sim::graph_book::exec_rec* rec = state_->graphs_.find_exec(exec);
    const std::uint32_t index = state_->streams_.find_stream(stream);
    if (rec != nullptr && index == sim::no_stream) {
      return state_->streams_.failure(stream);
    }
    if (rec == nullptr || index == sim::no_stream || state_->streams_[index].device != rec->device) {
      return sim::fail(status::invalid_value);
    }
    state_->streams_.submit(index);
    return drv_result{};
  });
}

drv_result sim_driver::graph_exec_destroy(graph_exec_t exec) noexcept {
  return state_->run(counters_, driver_call::graph_exec_destroy, [&] {
    sim::graph_book::exec_rec* rec = state_->graphs_.find_exec(exec);
    if (rec == nullptr) {
      return sim::fail(status::invalid_value);
    }
    rec->alive = false;
    return drv_result{};
  });
}

drv_result sim_driver::graph_destroy(graph_t graph) noexcept {
  return state_->run(counters_, driver_call::graph_destroy, [&] {
    sim::graph_book::graph_rec* rec = state_->graphs_.find_graph(graph);
    if (rec == nullptr) {
      return sim::fail(status::invalid_value);
    }
    rec->alive = false;
    return drv_result{};
  });
}

drv_result sim_driver::graph_mem_trim(int device) noexcept {
  return state_->run(counters_, driver_call::graph_mem_trim, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    return drv_result{};  // the sim keeps no graph memory
  });
}

std::size_t sim_driver::live_graphs() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->graphs_.live_graphs();
}

std::size_t sim_driver::live_graph_execs() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->graphs_.live_execs();
}

}  // namespace streampool
