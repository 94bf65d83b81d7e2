// sim_stream_calls.hpp (internal) — the simulated device's stream and event calls (stream_calls):
// create / destroy, synchronisation (which also settles pool frees and applies release
// thresholds), event record / query / wait, and the test controls about stream progress. The
// model they act on is stream_model (sim_streams.hpp) with capture_model's rules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "driver/sim/sim_device.hpp"

namespace streampool::sim {

/// sim_driver's stream and event calls on a device_model. The driver calls run under the device's
/// mutex (sim_driver::state::run); the test controls take it themselves and throw
/// streampool::error for an unknown or destroyed stream.
class stream_calls {
 public:
  explicit stream_calls(device_model& device) noexcept : device_(device) {}

  drv_result stream_create(int device, stream_t* out);
  drv_result stream_destroy(int device, stream_t stream);
  drv_result stream_synchronize(int device, stream_t stream);
  drv_result stream_wait_event(stream_t stream, event_t event);
  drv_result stream_capture_info(stream_t stream, capture_info* out);
  drv_result stream_get_device(stream_t stream, int* device);
  drv_result device_synchronize(int device);
  drv_result event_create(int device, event_t* out);
  drv_result event_destroy(int device, event_t event);
  drv_result event_record(event_t event, stream_t stream);
  drv_result event_query(event_t event);
  drv_result event_synchronize(event_t event);

  // Test controls (sim_driver's of the same names).
  void complete(stream_t stream);
  void complete_to(stream_t stream, std::uint64_t work);
  void set_capture(stream_t stream, capture_status status, std::uint64_t capture_id);
  [[nodiscard]] std::uint64_t submitted_work(stream_t stream) const;
  [[nodiscard]] std::uint64_t completed_work(stream_t stream) const;
  void wait_for(stream_t waiter, stream_t on);

 private:
  device_model& device_;
};

}  // namespace streampool::sim
