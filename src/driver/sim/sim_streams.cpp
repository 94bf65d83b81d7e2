// sim_streams.cpp — the simulated device's streams and events: the stream model (stream_model:
// fake handles, the submitted / completed work counters that model progress, stream_wait_event
// dependencies, default streams, the current device). The stream and event driver calls are
// stream_calls' (sim_stream_calls.cpp).
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "driver/sim/sim_streams.hpp"

namespace streampool {

// Note [Sim completion model]
// A stream is a counter of submitted work items and a counter of completed ones. event_record,
// free_async (and memset_async, memcpy_async, check_bytes, graph_launch, use) submit one item each; an event's target is the item it was recorded as. An
// event is complete when its stream's completed count reaches the target; one never recorded is
// complete. In eager mode submission completes at once. Otherwise work completes only through
// complete()/complete_all() (the test playing the GPU) or a synchronize call (the host waiting
// for the GPU: in the sim, completing the work *is* the model of waiting for it).
// stream_wait_event(s, e) stores "items of s after the current one need e's stream up to e's
// target"; completing s past that point first completes the other stream that far, recursively
// (each dependency is removed before it is followed, so a cycle cannot loop). The legacy stream's
// implicit synchronisation with other blocking streams is not modelled; streams from
// stream_create are non-blocking, as the real driver's are. cudaStreamPerThread (handle 2) is a
// separate stream per (thread, device), as with --default-stream per-thread.

namespace sim {

namespace {

// Note [Sim current device]
// CUDA's current device (and per-thread default stream) is per host thread, and here also per
// driver instance: two sims in one test must not share it. A thread_local map keyed by the
// instance's never-reused serial gives both, without a new thread inheriting an exited thread's
// device (which a map keyed by std::thread::id would do when ids are recycled). Threads start
// on device 0. Entries of destroyed instances stay behind in each thread: a few bytes each.
struct thread_rec {
  int device = 0;
  std::vector<std::uint32_t> per_thread_streams;  ///< by device; no_stream until first use
};
thread_local std::unordered_map<std::uint64_t, thread_rec> thread_recs;

}  // namespace

void stream_model::add_device() {
  legacy_.push_back(add_stream(static_cast<int>(legacy_.size()), true));
}

int stream_model::current_device() const noexcept {
  const auto found = thread_recs.find(serial_);
  return found == thread_recs.end() ? 0 : found->second.device;
}

void stream_model::set_current_device(int device) { thread_recs[serial_].device = device; }

std::uint32_t stream_model::per_thread_stream(int device) {
  std::vector<std::uint32_t>& streams = thread_recs[serial_].per_thread_streams;
  if (streams.size() <= static_cast<std::size_t>(device)) {
    streams.resize(static_cast<std::size_t>(device) + 1, no_stream);
  }
  if (streams[static_cast<std::size_t>(device)] == no_stream) {
    streams[static_cast<std::size_t>(device)] = add_stream(device, true);
  }
  return streams[static_cast<std::size_t>(device)];
}

std::uint32_t stream_model::find_stream(stream_t stream, int device) {
  const auto value = reinterpret_cast<std::uintptr_t>(stream);
  if (value <= 2) {  // nullptr, cudaStreamLegacy (1), cudaStreamPerThread (2)
    const int owner = device < 0 ? current_device() : device;
    if (owner < 0 || static_cast<std::size_t>(owner) >= legacy_.size()) {
      return no_stream;
    }
    return value == 2 ? per_thread_stream(owner) : legacy_[static_cast<std::size_t>(owner)];
  }
  const std::uint32_t index = handle_index(stream, stream_handle_base, streams_.size());
  if (index == no_stream || !streams_[index].alive || streams_[index].builtin) {
    return no_stream;
  }
  return index;
}

// Note [Sim destroyed streams]
// A call given the handle of a stream destroyed earlier fails as on the real driver, which does
// not answer "invalid handle" for it: on an H200 (CUDA 12/13) cudaStreamSynchronize of a destroyed
// stream returned cudaErrorDeviceUninitialized ("invalid device context"), and other calls may
// crash outright. So the sim answers status::other (not invalid_value, which callers may treat as
// a recoverable "no such stream"), describes it as the use of a destroyed stream, and counts it
// (sim_driver::destroyed_stream_uses), so a test can assert that code never uses a stream after
// destroying it: the replay bug where the replay's streams were destroyed before the allocator
// released expandable pages (which synchronises each segment's stream) showed only on the GPU
// until the sim answered like this. Handles are never reused, so the sim always knows.
drv_result stream_model::failure(stream_t stream) noexcept {
  const std::uint32_t index = handle_index(stream, stream_handle_base, streams_.size());
  if (index != no_stream && !streams_[index].alive && !streams_[index].builtin) {
    ++destroyed_uses_;
    return fail(status::other, reason_destroyed_stream);
  }
  return fail(status::invalid_value);
}

std::uint32_t stream_model::find_event(event_t event) const noexcept {
  const std::uint32_t index = handle_index(event, event_handle_base, events_.size());
  return index == no_stream || !events_[index].alive ? no_stream : index;
}

std::uint32_t stream_model::add_stream(int device, bool builtin) {
  stream_rec rec;
  rec.device = device;
  rec.builtin = builtin;
  streams_.push_back(std::move(rec));
  return static_cast<std::uint32_t>(streams_.size() - 1);
}

event_t stream_model::add_event(int device) {
  event_rec rec;
  rec.device = device;
  events_.push_back(rec);
  return static_cast<event_t>(make_handle(event_handle_base, static_cast<std::uint32_t>(events_.size() - 1)));
}

std::uint64_t stream_model::submit(std::uint32_t stream) noexcept {
  stream_rec& rec = streams_[stream];
  ++rec.submitted;
  if (eager_) {
    rec.completed = rec.submitted;
  }
  return rec.submitted;
}

void stream_model::wait(std::uint32_t waiter, std::uint32_t stream, std::uint64_t target) {
  if (stream != waiter && !done(stream, target)) {
    streams_[waiter].waits.push_back({streams_[waiter].submitted, stream, target});
  }
}

void stream_model::complete_to(std::uint32_t stream, std::uint64_t target) {
  target = std::min(target, streams_[stream].submitted);
  if (streams_[stream].completed >= target) {
    return;
  }
  for (;;) {
    std::vector<wait_dep>& waits = streams_[stream].waits;
    const auto blocking =
        std::find_if(waits.begin(), waits.end(), [&](const wait_dep& w) { return w.after < target; });
    if (blocking == waits.end()) {
      break;
    }
    const wait_dep dependency = *blocking;
    waits.erase(blocking);
    complete_to(dependency.stream, dependency.target);
  }
  streams_[stream].completed = target;
}

void stream_model::complete_device(int device) {
  for (std::uint32_t index = 0; index < streams_.size(); ++index) {
    if (streams_[index].device == device) {
      complete_stream(index);
    }
  }
}

void stream_model::complete_all() {
  for (std::uint32_t index = 0; index < streams_.size(); ++index) {
    complete_stream(index);
  }
}

void stream_model::set_eager(bool eager) {
  eager_ = eager;
  if (eager) {
    complete_all();
  }
}

}  // namespace sim

}  // namespace streampool
