// driver_host_ops.cpp — the defaults of the pinned-host-memory calls of `driver` (host_alloc,
// host_free, host_register, host_unregister, memcpy_async): a driver that predates them (a test
// double, a wrapper) still compiles and reports that it cannot do them. cuda_host.cpp and
// sim_host.cpp hold the real ones.
#include "streampool/driver.hpp"

namespace streampool {

drv_result driver::host_alloc(std::size_t /*bytes*/, void** out) noexcept {
  if (out != nullptr) *out = nullptr;
  return {status::not_supported, 0};
}

drv_result driver::host_free(void* /*ptr*/) noexcept { return {status::not_supported, 0}; }

drv_result driver::host_register(void* /*ptr*/, std::size_t /*bytes*/) noexcept {
  return {status::not_supported, 0};
}

drv_result driver::host_unregister(void* /*ptr*/) noexcept { return {status::not_supported, 0}; }

drv_result driver::memcpy_async(void* /*dst*/, const void* /*src*/, std::size_t /*bytes*/,
                                stream_t /*stream*/) noexcept {
  return {status::not_supported, 0};
}

}  // namespace streampool
