// sim_graph.cpp — the simulated device's capture and graph calls: stream_begin_capture /
// stream_end_capture (the joined-back check and invalidation at the end), fake graphs and
// executables (graph_book), and launches that submit one work item. The sim builds no real graph:
// what it checks is the bookkeeping that CUDA enforces. Callbacks tied to a graph's lifetime
// (capture_on_graph_release) run when it and its executables are gone.
#include <algorithm>
#include <utility>

#include "driver/sim_state.hpp"

namespace streampool {

// Capture state and its rules are capture_model's (sim_capture.cpp, Note [Sim capture sequences]).

// --- capture -------------------------------------------------------------------------------------

drv_result sim_driver::thread_exchange_capture_mode(capture_mode* mode) noexcept {
  if (mode == nullptr) return sim::fail(status::invalid_value);
  *mode = sim::capture_model::exchange_thread_mode(*mode);
  return drv_result{};
}

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
    const std::uint64_t id = state_->captures_.next_id();
    state_->captures_.enter(index, id, mode != capture_mode::relaxed, /*begun=*/true, /*origin=*/true);
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
      state_->captures_.leave(other);
    }
    if (origin.capture == capture_status::invalidated || unjoined) {
      state_->graphs_.release_capture_hooks(origin.capture_id);  // no graph: released now
      return sim::fail(status::illegal_in_capture);
    }
    *out = state_->graphs_.add_graph(origin.device, origin.capture_id);
    return drv_result{};
  });
}

// Note [Sim graph release]
// capture_on_graph_release keeps the callback with the capture id; stream_end_capture hands the
// capture's callbacks to its graph, or runs them at once when it ends without one. They run when
// the graph and every executable instantiated from it are destroyed, synchronously inside that
// destroy call (CUDA runs them later on a thread of its own, once launches are done; the callers
// only set a flag, so the difference does not show).
drv_result sim_driver::capture_on_graph_release(stream_t stream, void (*on_release)(void*), void* arg) noexcept {
  return state_->run(counters_, driver_call::capture_on_graph_release, [&] {
    const std::uint32_t index = state_->streams_.find_stream(stream);
    if (index == sim::no_stream) {
      return state_->streams_.failure(stream);
    }
    const sim::stream_rec& rec = state_->streams_[index];
    if (on_release == nullptr || rec.capture != capture_status::active) {
      return sim::fail(status::invalid_value);
    }
    state_->graphs_.add_capture_hook(rec.capture_id, sim::graph_book::release_hook{on_release, arg});
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
    *out = state_->graphs_.add_exec(graph, flags);
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
    state_->graphs_.mark_launched(*rec);
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
    state_->graphs_.destroy_exec(*rec);
    return drv_result{};
  });
}

drv_result sim_driver::graph_destroy(graph_t graph) noexcept {
  return state_->run(counters_, driver_call::graph_destroy, [&] {
    sim::graph_book::graph_rec* rec = state_->graphs_.find_graph(graph);
    if (rec == nullptr) {
      return sim::fail(status::invalid_value);
    }
    state_->graphs_.destroy_graph(*rec);
    return drv_result{};
  });
}

drv_result sim_driver::graph_mem_trim(int device) noexcept {
  return state_->run(counters_, driver_call::graph_mem_trim, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (state_->captures_.active() > 0) {
      return state_->captures_.refuse();
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
