// c_api_trace.cpp — the C entry points for what the Python package (and any C user) needs beyond
// alloc/free: resetting statistics, recording and exporting the allocation trace, the device
// count, and creating the allocator on the simulated device. Errors are handled as in c_api.cpp
// (c_api_guarded / c_api_with_allocator in c_api_internal.hpp): a status and a per-thread message.
#include <memory>
#include <string>

#include "c_api/c_api_internal.hpp"
#include "streampool/allocator.hpp"
#include "streampool/c_api.h"
#include "streampool/sim_driver.hpp"

namespace {

using streampool::allocator;
using streampool::c_api_impl::c_api_guarded;
using streampool::c_api_impl::c_api_with_allocator;

/// Upper bound of streampool_init_sim's device_count (a sim device costs a few KiB of state).
constexpr int max_sim_devices = 64;

}  // namespace

extern "C" {

int streampool_reset_peak_stats(int device) {
  return c_api_with_allocator([&](allocator& alloc) { alloc.reset_peak_stats(device); });
}

int streampool_reset_accumulated_stats(int device) {
  return c_api_with_allocator([&](allocator& alloc) { alloc.reset_accumulated_stats(device); });
}

int streampool_record_history(int enabled, size_t max_entries) {
  return c_api_with_allocator([&](allocator& alloc) {
    if (enabled != 0 && max_entries == 0) {
      throw streampool::error("streampool_record_history: max_entries must be at least 1 when recording is on "
                              "(it is the number of events kept per device)");
    }
    alloc.record_history(enabled != 0, max_entries);
  });
}

const char* streampool_trace_csv(int device) {
  thread_local std::string text;
  const int status =
      c_api_with_allocator([&](allocator& alloc) { text = streampool::trace_to_csv(alloc.trace(device)); });
  return status == STREAMPOOL_OK ? text.c_str() : nullptr;
}

int streampool_device_count(int* count) {
  return c_api_with_allocator([&](allocator& alloc) {
    if (count == nullptr) throw streampool::error("streampool_device_count: count is NULL");
    int n = 0;
    const streampool::drv_result result = alloc.device_driver().device_count(&n);
    if (!result.ok()) {
      throw streampool::error("streampool_device_count: the driver failed: " + alloc.device_driver().describe(result));
    }
    *count = n;
  });
}

int streampool_init_sim(const char* config, size_t capacity_bytes, int device_count) {
  return c_api_guarded([&] {
    if (device_count < 1 || device_count > max_sim_devices) {
      throw streampool::error("streampool_init_sim: device_count " + std::to_string(device_count) +
                              " is out of range; pass 1.." + std::to_string(max_sim_devices));
    }
    streampool::sim_options options;
    options.device_count = device_count;
    if (capacity_bytes != 0) options.capacity = capacity_bytes;
    auto settings = config != nullptr ? streampool::parse_config(config) : streampool::config_from_env();
    auto drv = std::make_shared<streampool::sim_driver>(options);
    // c_api_install refuses (STREAMPOOL_ERROR_STATE) when an allocator already exists.
    streampool::c_api_impl::c_api_install(streampool::make_allocator(std::move(settings), std::move(drv)));
  });
}

}  // extern "C"
