// sim_streams.cpp — the simulated device's streams and events: fake handles, the submitted /
// completed work counters that model progress, stream_wait_event dependencies, synchronisation
// (which also settles pool frees and applies release thresholds) and capture legality.
#include <algorithm>

#include "driver/sim_state.hpp"

namespace streampool {

// Note [Sim completion model]
// A stream is a counter of submitted work items and a counter of completed ones. event_record
// and free_async submit one item each; an event's target is the item it was recorded as. An
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

std::uint32_t sim_driver::state::find_stream(stream_t stream, int device) {
  const auto value = reinterpret_cast<std::uintptr_t>(stream);
  if (value <= 2) {  // nullptr, cudaStreamLegacy (1), cudaStreamPerThread (2)
    const int owner = device < 0 ? current_device() : device;
    if (owner < 0 || static_cast<std::size_t>(owner) >= devices_.size()) {
      return sim::no_stream;
    }
    return value == 2 ? per_thread_stream(owner) : devices_[static_cast<std::size_t>(owner)].legacy_stream;
  }
  const std::uint32_t index = sim::handle_index(stream, sim::stream_handle_base, streams_.size());
  if (index == sim::no_stream || !streams_[index].alive || streams_[index].builtin) {
    return sim::no_stream;
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
drv_result sim_driver::state::stream_failure(stream_t stream) noexcept {
  const std::uint32_t index = sim::handle_index(stream, sim::stream_handle_base, streams_.size());
  if (index != sim::no_stream && !streams_[index].alive && !streams_[index].builtin) {
    ++destroyed_stream_uses_;
    return sim::fail(status::other, sim::reason_destroyed_stream);
  }
  return sim::fail(status::invalid_value);
}

std::uint64_t sim_driver::destroyed_stream_uses() const {
  const std::lock_guard lock(state_->mutex_);
  return state_->destroyed_stream_uses_;
}

std::uint32_t sim_driver::state::find_event(event_t event) const noexcept {
  const std::uint32_t index = sim::handle_index(event, sim::event_handle_base, events_.size());
  return index == sim::no_stream || !events_[index].alive ? sim::no_stream : index;
}

std::uint32_t sim_driver::state::add_stream(int device, bool builtin) {
  sim::stream_rec rec;
  rec.device = device;
  rec.builtin = builtin;
  streams_.push_back(std::move(rec));
  return static_cast<std::uint32_t>(streams_.size() - 1);
}

std::uint64_t sim_driver::state::submit(std::uint32_t stream) noexcept {
  sim::stream_rec& rec = streams_[stream];
  ++rec.submitted;
  if (eager_) {
    rec.completed = rec.submitted;
  }
  return rec.submitted;
}

void sim_driver::state::complete_to(std::uint32_t stream, std::uint64_t target) {
  target = std::min(target, streams_[stream].submitted);
  if (streams_[stream].completed >= target) {
    return;
  }
  for (;;) {
    std::vector<sim::wait_dep>& waits = streams_[stream].waits;
    const auto blocking =
        std::find_if(waits.begin(), waits.end(), [&](const sim::wait_dep& w) { return w.after < target; });
    if (blocking == waits.end()) {
      break;
    }
    const sim::wait_dep dependency = *blocking;
    waits.erase(blocking);
    complete_to(dependency.stream, dependency.target);
  }
  streams_[stream].completed = target;
}

void sim_driver::state::complete_all() {
  for (std::uint32_t index = 0; index < streams_.size(); ++index) {
    complete_stream(index);
  }
}

void sim_driver::state::sync_point(int device) {
  for (const auto& pool : pools_) {
    if (pool->device != device) {
      continue;
    }
    settle_pending(*pool);
    if (!pool->alive) {
      trim(*pool, 0, true);
    } else if (pool->reserved > pool->release_threshold) {
      trim(*pool, pool->release_threshold, false);
    }
  }
}

// --- streams -------------------------------------------------------------------------------------

drv_result sim_driver::stream_create(int device, stream_t* out) noexcept {
  return state_->run(counters_, driver_call::stream_create, [&] {
    *out = nullptr;
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    *out = sim::make_handle(sim::stream_handle_base, state_->add_stream(device, false));
    return drv_result{};
  });
}

drv_result sim_driver::stream_destroy(int device, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::stream_destroy, [&] {
    const std::uint32_t index = stream == nullptr ? sim::no_stream : state_->find_stream(stream);
    if (index == sim::no_stream && stream != nullptr) {
      return state_->stream_failure(stream);
    }
    if (index == sim::no_stream || state_->streams_[index].builtin || state_->streams_[index].device != device) {
      return sim::fail(status::invalid_value);
    }
    state_->complete_stream(index);  // CUDA lets pending work finish; the sim finishes it now
    const sim::stream_rec& rec = state_->streams_[index];
    if (rec.begun && rec.origin) {  // the capture sequence dies with its origin stream
      const std::uint64_t id = rec.capture_id;
      for (std::uint32_t other = 0; other < state_->streams_.size(); ++other) {
        if (state_->streams_[other].begun && state_->streams_[other].capture_id == id) state_->leave_capture(other);
      }
    }
    state_->leave_capture(index);
    state_->streams_[index].alive = false;
    return drv_result{};
  });
}

drv_result sim_driver::stream_synchronize(int device, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::stream_synchronize, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    const std::uint32_t index = state_->find_stream(stream, device);
    if (index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (state_->streams_[index].device != device) {
      return sim::fail(status::invalid_value);
    }
    state_->complete_stream(index);
    state_->sync_point(device);
    return drv_result{};
  });
}

drv_result sim_driver::stream_wait_event(stream_t stream, event_t event) noexcept {
  return state_->run(counters_, driver_call::stream_wait_event, [&] {
    const std::uint32_t index = state_->find_stream(stream);
    const std::uint32_t event_index = state_->find_event(event);
    if (index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (event_index == sim::no_stream) {
      return sim::fail(status::invalid_value);
    }
    const sim::event_rec& rec = state_->events_[event_index];
    if (rec.stream != sim::no_stream && rec.stream != index && !state_->stream_done(rec.stream, rec.target)) {
      state_->streams_[index].waits.push_back({state_->streams_[index].submitted, rec.stream, rec.target});
    }
    if (rec.capture_id != 0) {
      state_->join_on_wait(index, rec);
    }
    return drv_result{};
  });
}

drv_result sim_driver::stream_capture_info(stream_t stream, capture_info* out) noexcept {
  return state_->run(counters_, driver_call::stream_capture_info, [&] {
    const std::uint32_t index = state_->find_stream(stream);
    if (index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    out->status = state_->streams_[index].capture;
    out->id = state_->streams_[index].capture_id;
    return drv_result{};
  });
}

drv_result sim_driver::stream_get_device(stream_t stream, int* device) noexcept {
  return state_->run(counters_, driver_call::stream_get_device, [&] {
    const std::uint32_t index = state_->find_stream(stream);
    if (index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    *device = state_->streams_[index].device;
    return drv_result{};
  });
}

drv_result sim_driver::device_synchronize(int device) noexcept {
  return state_->run(counters_, driver_call::device_synchronize, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    for (std::uint32_t index = 0; index < state_->streams_.size(); ++index) {
      if (state_->streams_[index].device == device) {
        state_->complete_stream(index);
      }
    }
    state_->sync_point(device);
    return drv_result{};
  });
}

// --- events --------------------------------------------------------------------------------------

drv_result sim_driver::event_create(int device, event_t* out) noexcept {
  return state_->run(counters_, driver_call::event_create, [&] {
    *out = nullptr;
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    sim::event_rec rec;
    rec.device = device;
    state_->events_.push_back(rec);
    *out = sim::make_handle(sim::event_handle_base, static_cast<std::uint32_t>(state_->events_.size() - 1));
    return drv_result{};
  });
}

drv_result sim_driver::event_destroy(int device, event_t event) noexcept {
  return state_->run(counters_, driver_call::event_destroy, [&] {
    const std::uint32_t index = state_->find_event(event);
    if (index == sim::no_stream || state_->events_[index].device != device) {
      return sim::fail(status::invalid_value);
    }
    state_->events_[index].alive = false;
    return drv_result{};
  });
}

drv_result sim_driver::event_record(event_t event, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::event_record, [&] {
    const std::uint32_t index = state_->find_event(event);
    const std::uint32_t stream_index = state_->find_stream(stream);
    if (stream_index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (index == sim::no_stream ||
        state_->events_[index].device != state_->streams_[stream_index].device) {
      return sim::fail(status::invalid_value);
    }
    const sim::stream_rec& recorder = state_->streams_[stream_index];
    state_->events_[index].capture_id = recorder.capture == capture_status::active ? recorder.capture_id : 0;
    state_->events_[index].stream = stream_index;
    state_->events_[index].target = state_->submit(stream_index);
    return drv_result{};
  });
}

drv_result sim_driver::event_query(event_t event) noexcept {
  return state_->run(counters_, driver_call::event_query, [&] {
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    const std::uint32_t index = state_->find_event(event);
    if (index == sim::no_stream) {
      return sim::fail(status::invalid_value);
    }
    const sim::event_rec& rec = state_->events_[index];
    if (rec.stream == sim::no_stream || state_->stream_done(rec.stream, rec.target)) {
      return drv_result{};
    }
    return sim::fail(status::not_ready);
  });
}

drv_result sim_driver::event_synchronize(event_t event) noexcept {
  return state_->run(counters_, driver_call::event_synchronize, [&] {
    if (state_->active_captures_ > 0) {
      return state_->refuse_in_capture();
    }
    const std::uint32_t index = state_->find_event(event);
    if (index == sim::no_stream) {
      return sim::fail(status::invalid_value);
    }
    const sim::event_rec rec = state_->events_[index];
    if (rec.stream != sim::no_stream) {
      state_->complete_to(rec.stream, rec.target);
    }
    state_->sync_point(rec.device);
    return drv_result{};
  });
}

}  // namespace streampool
