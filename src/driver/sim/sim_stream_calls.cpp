// sim_stream_calls.cpp — the simulated device's stream and event calls (stream_calls) and the
// test controls that drive stream progress (complete, set_capture, wait_for, work counters). See
// Note [Sim completion model] in sim_streams.cpp.
#include "driver/sim/sim_stream_calls.hpp"
#include "streampool/errors.hpp"

namespace streampool::sim {

drv_result stream_calls::stream_create(int device, stream_t* out) {
  *out = nullptr;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  *out = make_handle(stream_handle_base, device_.streams_.add_stream(device, false));
  return drv_result{};
}

drv_result stream_calls::stream_destroy(int device, stream_t stream) {
  const std::uint32_t index = stream == nullptr ? no_stream : device_.streams_.find_stream(stream);
  if (index == no_stream && stream != nullptr) {
    return device_.streams_.failure(stream);
  }
  if (index == no_stream || device_.streams_[index].builtin || device_.streams_[index].device != device) {
    return fail(status::invalid_value);
  }
  device_.streams_.complete_stream(index);  // CUDA lets pending work finish; the sim finishes it now
  const stream_rec& rec = device_.streams_[index];
  if (rec.begun && rec.origin) {  // the capture sequence dies with its origin stream
    const std::uint64_t id = rec.capture_id;
    for (std::uint32_t other = 0; other < device_.streams_.size(); ++other) {
      if (device_.streams_[other].begun && device_.streams_[other].capture_id == id) device_.captures_.leave(other);
    }
  }
  device_.captures_.leave(index);
  device_.streams_[index].alive = false;
  return drv_result{};
}

drv_result stream_calls::stream_synchronize(int device, stream_t stream) {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  const std::uint32_t index = device_.streams_.find_stream(stream, device);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (device_.streams_[index].device != device) {
    return fail(status::invalid_value);
  }
  device_.streams_.complete_stream(index);
  device_.pools_.sync_point(device, device_.streams_);
  return drv_result{};
}

drv_result stream_calls::stream_wait_event(stream_t stream, event_t event) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  const std::uint32_t event_index = device_.streams_.find_event(event);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (event_index == no_stream) {
    return fail(status::invalid_value);
  }
  const event_rec& rec = device_.streams_.event(event_index);
  if (rec.stream != no_stream) {
    device_.streams_.wait(index, rec.stream, rec.target);
  }
  if (rec.capture_id != 0) {
    device_.captures_.join_on_wait(index, rec);
  }
  return drv_result{};
}

drv_result stream_calls::stream_capture_info(stream_t stream, capture_info* out) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  out->status = device_.streams_[index].capture;
  // As CUDA: the capture id is valid only while the capture is active (cudaStreamGetCaptureInfo
  // returns one "only if ... captureStatus is cudaStreamCaptureStatusActive"), so an invalidated
  // capture reports 0 (Note [Capture filter] in src/graph/capture_scope.cpp).
  out->id = out->status == capture_status::active ? device_.streams_[index].capture_id : 0;
  return drv_result{};
}

drv_result stream_calls::stream_get_device(stream_t stream, int* device) {
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    return device_.streams_.failure(stream);
  }
  *device = device_.streams_[index].device;
  return drv_result{};
}

drv_result stream_calls::device_synchronize(int device) {
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  device_.streams_.complete_device(device);
  device_.pools_.sync_point(device, device_.streams_);
  return drv_result{};
}

drv_result stream_calls::event_create(int device, event_t* out) {
  *out = nullptr;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  *out = device_.streams_.add_event(device);
  return drv_result{};
}

drv_result stream_calls::event_destroy(int device, event_t event) {
  const std::uint32_t index = device_.streams_.find_event(event);
  if (index == no_stream || device_.streams_.event(index).device != device) {
    return fail(status::invalid_value);
  }
  device_.streams_.event(index).alive = false;
  return drv_result{};
}

drv_result stream_calls::event_record(event_t event, stream_t stream) {
  const std::uint32_t index = device_.streams_.find_event(event);
  const std::uint32_t stream_index = device_.streams_.find_stream(stream);
  if (stream_index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (index == no_stream ||
      device_.streams_.event(index).device != device_.streams_[stream_index].device) {
    return fail(status::invalid_value);
  }
  const stream_rec& recorder = device_.streams_[stream_index];
  device_.streams_.event(index).capture_id = recorder.capture == capture_status::active ? recorder.capture_id : 0;
  device_.streams_.event(index).stream = stream_index;
  device_.streams_.event(index).target = device_.streams_.submit(stream_index);
  return drv_result{};
}

drv_result stream_calls::event_query(event_t event) {
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  const std::uint32_t index = device_.streams_.find_event(event);
  if (index == no_stream) {
    return fail(status::invalid_value);
  }
  const event_rec& rec = device_.streams_.event(index);
  if (rec.stream == no_stream || device_.streams_.done(rec.stream, rec.target)) {
    return drv_result{};
  }
  return fail(status::not_ready);
}

drv_result stream_calls::event_synchronize(event_t event) {
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  const std::uint32_t index = device_.streams_.find_event(event);
  if (index == no_stream) {
    return fail(status::invalid_value);
  }
  const event_rec rec = device_.streams_.event(index);
  if (rec.stream != no_stream) {
    device_.streams_.complete_to(rec.stream, rec.target);
  }
  device_.pools_.sync_point(rec.device, device_.streams_);
  return drv_result{};
}

void stream_calls::complete(stream_t stream) {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    throw error("sim_driver::complete: unknown or destroyed stream");
  }
  device_.streams_.complete_stream(index);
}

void stream_calls::complete_to(stream_t stream, std::uint64_t work) {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    throw error("sim_driver::complete_to: unknown or destroyed stream");
  }
  device_.streams_.complete_to(index, work);
}

void stream_calls::set_capture(stream_t stream, capture_status status, std::uint64_t capture_id) {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) {
    throw error("sim_driver::set_capture: unknown or destroyed stream");
  }
  device_.captures_.leave(index);
  if (status == capture_status::active) {
    device_.captures_.enter(index, capture_id, /*strict=*/true, /*begun=*/false, /*origin=*/false);
  } else if (status == capture_status::invalidated) {
    device_.streams_[index].capture = status;
    device_.streams_[index].capture_id = capture_id;
  }
}

std::uint64_t stream_calls::submitted_work(stream_t stream) const {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) throw error("sim_driver::submitted_work: not a live stream of this sim");
  return device_.streams_[index].submitted;
}

std::uint64_t stream_calls::completed_work(stream_t stream) const {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(stream);
  if (index == no_stream) throw error("sim_driver::completed_work: not a live stream of this sim");
  return device_.streams_[index].completed;
}

void stream_calls::wait_for(stream_t waiter, stream_t on) {
  const std::lock_guard lock(device_.mutex_);
  const std::uint32_t index = device_.streams_.find_stream(waiter);
  const std::uint32_t other = device_.streams_.find_stream(on);
  if (index == no_stream || other == no_stream) {
    throw error("sim_driver::wait_for: unknown or destroyed stream");
  }
  device_.streams_.wait(index, other, device_.streams_[other].submitted);
}

}  // namespace streampool::sim
