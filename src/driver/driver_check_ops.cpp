// driver_check_ops.cpp — the defaults of the checking-mode calls of `driver` (memset_async,
// check_bytes): a driver that predates them (a test double, a wrapper) still compiles and reports
// that it cannot do them. cuda_check_ops.cpp and sim_content_calls.cpp hold the real ones.
#include "streampool/driver.hpp"

namespace streampool {

drv_result driver::memset_async(int /*device*/, void* /*ptr*/, std::uint8_t /*value*/, std::size_t /*bytes*/,
                                stream_t /*stream*/) noexcept {
  return {status::not_supported, 0};
}

drv_result driver::check_bytes(int /*device*/, const void* /*ptr*/, std::size_t /*bytes*/,
                               std::uint8_t /*expected*/, stream_t /*stream*/, byte_check* out) noexcept {
  if (out != nullptr) *out = byte_check{};
  return {status::not_supported, 0};
}

}  // namespace streampool
