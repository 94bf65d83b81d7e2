// sim_content_calls.hpp (internal) — what the simulated device's kernels do to memory
// (content_calls): memset_async and check_bytes for checking mode (src/check), and the test
// controls that play a kernel: write_bytes / read_bytes (contents) and use (the hazard checker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "driver/sim/sim_device.hpp"

namespace streampool::sim {

/// sim_driver's contents calls and kernel-playing test controls on a device_model. The driver
/// calls run under the device's mutex (sim_driver::state::run); the test controls take it
/// themselves and throw streampool::error for a bad stream or a range that is not device memory.
class content_calls {
 public:
  explicit content_calls(device_model& device) noexcept : device_(device) {}

  drv_result memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes, stream_t stream);
  drv_result check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected, stream_t stream,
                         byte_check* out);

  // Test controls (sim_driver's of the same names).
  void write_bytes(void* ptr, const void* data, std::size_t bytes);
  [[nodiscard]] std::vector<std::uint8_t> read_bytes(const void* ptr, std::size_t bytes) const;
  bool use(stream_t stream, const void* ptr, std::size_t bytes);

 private:
  /// `stream`'s index into `index` when it is a live stream of `device`; else the driver's error.
  [[nodiscard]] drv_result stream_of(int device, stream_t stream, std::uint32_t& index) const;

  device_model& device_;
};

}  // namespace streampool::sim
