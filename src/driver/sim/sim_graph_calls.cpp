// sim_graph_calls.cpp — the simulated device's capture and graph calls (graph_calls): begin / end
// capture (the joined-back check and invalidation at the end), instantiate, launches that submit
// one work item, destroys, and capture_on_graph_release. The sim builds no real graph: what it
// checks is the bookkeeping that CUDA enforces (Note [Sim capture sequences] in sim_capture.cpp).
#include "driver/sim/sim_graph_calls.hpp"

namespace streampool::sim {

drv_result graph_calls::stream_begin_capture(stream_t stream, capture_mode mode) {
  const auto value = reinterpret_cast<std::uintptr_t>(stream);
  if (value == 0 || value == 1) {
    return fail(status::illegal_in_capture);  // the legacy stream cannot be captured
  }
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (device_.streams_[index].capture != capture_status::none) {
    return fail(status::illegal_in_capture);  // already capturing
  }
  const std::uint64_t id = device_.captures_.next_id();
  device_.captures_.enter(index, id, mode != capture_mode::relaxed, /*begun=*/true, /*origin=*/true);
  return drv_result{};
}

drv_result graph_calls::stream_end_capture(stream_t stream, graph_t* out) {
  *out = nullptr;
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  const stream_rec origin = device_.streams_[index];
  if (origin.capture == capture_status::none || !origin.begun || !origin.origin) {
    return fail(status::illegal_in_capture);  // not capturing, or not where it began
  }
  bool unjoined = false;
  for (std::uint32_t other = 0; other < device_.streams_.size(); ++other) {
    stream_rec& rec = device_.streams_[other];
    if (rec.capture == capture_status::none || rec.capture_id != origin.capture_id || !rec.begun) {
      continue;
    }
    unjoined = unjoined || (other != index && rec.submitted > rec.joined_through);
    device_.captures_.leave(other);
  }
  if (origin.capture == capture_status::invalidated || unjoined) {
    device_.graphs_.release_capture_hooks(origin.capture_id);  // no graph: released now
    return fail(status::illegal_in_capture);
  }
  *out = device_.graphs_.add_graph(origin.device, origin.capture_id);
  return drv_result{};
}

// Note [Sim graph release]
// capture_on_graph_release keeps the callback with the capture id; stream_end_capture hands the
// capture's callbacks to its graph, or runs them at once when it ends without one. They run when
// the graph and every executable instantiated from it are destroyed, synchronously inside that
// destroy call (CUDA runs them later on a thread of its own, once launches are done; the callers
// only set a flag, so the difference does not show).
drv_result graph_calls::capture_on_graph_release(stream_t stream, void (*on_release)(void*), void* arg) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  const stream_rec& rec = device_.streams_[index];
  if (on_release == nullptr || rec.capture != capture_status::active) {
    return fail(status::invalid_value);
  }
  device_.graphs_.add_capture_hook(rec.capture_id, graph_book::release_hook{on_release, arg});
  return drv_result{};
}

drv_result graph_calls::capture_dependencies(stream_t stream, std::vector<graph_node_t>* out) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (out == nullptr) {
    return fail(status::invalid_value);
  }
  return device_.captures_.dependencies(index, out);
}

drv_result graph_calls::graph_node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) {
  if (out == nullptr) {
    return fail(status::invalid_value);
  }
  return device_.captures_.node_dependencies(node, out);
}

drv_result graph_calls::graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags) {
  *out = nullptr;
  const graph_book::graph_rec* rec = device_.graphs_.find_graph(graph);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  *out = device_.graphs_.add_exec(graph, flags);
  return drv_result{};
}

drv_result graph_calls::graph_launch(graph_exec_t exec, stream_t stream) {
  const graph_book::exec_rec* rec = device_.graphs_.find_exec(exec);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (rec != nullptr && index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (rec == nullptr || index == no_stream || device_.streams_[index].device != rec->device) {
    return fail(status::invalid_value);
  }
  device_.graphs_.mark_launched(*rec);
  device_.streams_.submit(index);
  return drv_result{};
}

drv_result graph_calls::graph_exec_destroy(graph_exec_t exec) {
  graph_book::exec_rec* rec = device_.graphs_.find_exec(exec);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  device_.graphs_.destroy_exec(*rec);
  return drv_result{};
}

drv_result graph_calls::graph_destroy(graph_t graph) {
  graph_book::graph_rec* rec = device_.graphs_.find_graph(graph);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  device_.graphs_.destroy_graph(*rec);
  return drv_result{};
}

drv_result graph_calls::graph_mem_trim(int device) {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  return drv_result{};  // the sim keeps no graph memory
}

}  // namespace streampool::sim
