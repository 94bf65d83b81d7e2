// driver_common.cpp — the parts of driver.hpp shared by every driver: the names of calls and
// statuses (for counters, fault injection and messages) and check(), the throwing wrapper that
// turns a failed drv_result into a streampool::cuda_error.
#include <string>
#include <string_view>

#include "streampool/driver.hpp"
#include "streampool/errors.hpp"

namespace streampool {

std::string_view to_string(driver_call call) noexcept {
  switch (call) {
    case driver_call::malloc: return "malloc";
    case driver_call::free: return "free";
    case driver_call::mem_get_info: return "mem_get_info";
    case driver_call::stream_create: return "stream_create";
    case driver_call::stream_destroy: return "stream_destroy";
    case driver_call::stream_synchronize: return "stream_synchronize";
    case driver_call::stream_wait_event: return "stream_wait_event";
    case driver_call::stream_capture_info: return "stream_capture_info";
    case driver_call::device_synchronize: return "device_synchronize";
    case driver_call::event_create: return "event_create";
    case driver_call::event_destroy: return "event_destroy";
    case driver_call::event_record: return "event_record";
    case driver_call::event_query: return "event_query";
    case driver_call::event_synchronize: return "event_synchronize";
    case driver_call::pool_get_default: return "pool_get_default";
    case driver_call::pool_create: return "pool_create";
    case driver_call::pool_destroy: return "pool_destroy";
    case driver_call::pool_set_attr: return "pool_set_attr";
    case driver_call::pool_get_attr: return "pool_get_attr";
    case driver_call::pool_set_access: return "pool_set_access";
    case driver_call::malloc_async: return "malloc_async";
    case driver_call::free_async: return "free_async";
    case driver_call::pool_trim_to: return "pool_trim_to";
    case driver_call::vmm_reserve: return "vmm_reserve";
    case driver_call::vmm_free: return "vmm_free";
    case driver_call::vmm_create: return "vmm_create";
    case driver_call::vmm_release: return "vmm_release";
    case driver_call::vmm_map: return "vmm_map";
    case driver_call::vmm_set_access: return "vmm_set_access";
    case driver_call::vmm_unmap: return "vmm_unmap";
    case driver_call::stream_begin_capture: return "stream_begin_capture";
    case driver_call::stream_end_capture: return "stream_end_capture";
    case driver_call::graph_instantiate: return "graph_instantiate";
    case driver_call::graph_launch: return "graph_launch";
    case driver_call::graph_exec_destroy: return "graph_exec_destroy";
    case driver_call::graph_destroy: return "graph_destroy";
    case driver_call::graph_mem_trim: return "graph_mem_trim";
    case driver_call::memset_async: return "memset_async";
    case driver_call::check_bytes: return "check_bytes";
    case driver_call::stream_get_device: return "stream_get_device";
    case driver_call::host_alloc: return "host_alloc";
    case driver_call::host_free: return "host_free";
    case driver_call::host_register: return "host_register";
    case driver_call::host_unregister: return "host_unregister";
    case driver_call::memcpy_async: return "memcpy_async";
    case driver_call::capture_on_graph_release: return "capture_on_graph_release";
    case driver_call::capture_dependencies: return "capture_dependencies";
    case driver_call::graph_node_dependencies: return "graph_node_dependencies";
    case driver_call::vmm_export_fd: return "vmm_export_fd";
    case driver_call::vmm_import_fd: return "vmm_import_fd";
    case driver_call::vmm_retain: return "vmm_retain";
    case driver_call::count_: break;
  }
  return "unknown_call";
}

std::string_view to_string(status code) noexcept {
  switch (code) {
    case status::ok: return "ok";
    case status::out_of_memory: return "out_of_memory";
    case status::not_ready: return "not_ready";
    case status::invalid_value: return "invalid_value";
    case status::invalid_device: return "invalid_device";
    case status::not_supported: return "not_supported";
    case status::no_device: return "no_device";
    case status::illegal_in_capture: return "illegal_in_capture";
    case status::other: return "other";
  }
  return "unknown_status";
}

// The capture and graph calls are virtual with these defaults so that a driver written before
// them (a test double, a wrapper) still compiles; it reports that it cannot capture.
namespace {
constexpr drv_result unsupported{status::not_supported, 0};
}  // namespace

drv_result driver::stream_begin_capture(stream_t /*stream*/, capture_mode /*mode*/) noexcept { return unsupported; }
drv_result driver::stream_end_capture(stream_t /*stream*/, graph_t* out) noexcept {
  *out = nullptr;
  return unsupported;
}
drv_result driver::graph_instantiate(graph_t /*graph*/, graph_exec_t* out, instantiate_flags /*flags*/) noexcept {
  *out = nullptr;
  return unsupported;
}
drv_result driver::graph_launch(graph_exec_t /*exec*/, stream_t /*stream*/) noexcept { return unsupported; }
drv_result driver::graph_exec_destroy(graph_exec_t /*exec*/) noexcept { return unsupported; }
drv_result driver::graph_destroy(graph_t /*graph*/) noexcept { return unsupported; }
drv_result driver::graph_mem_trim(int /*device*/) noexcept { return unsupported; }
drv_result driver::stream_get_device(stream_t /*stream*/, int* /*device*/) noexcept { return unsupported; }
drv_result driver::thread_exchange_capture_mode(capture_mode* /*mode*/) noexcept { return unsupported; }
drv_result driver::capture_on_graph_release(stream_t /*stream*/, void (* /*on_release*/)(void*),
                                            void* /*arg*/) noexcept {
  return unsupported;
}
drv_result driver::capture_dependencies(stream_t /*stream*/, std::vector<graph_node_t>* /*out*/) noexcept {
  return unsupported;
}
drv_result driver::graph_node_dependencies(graph_node_t /*node*/, std::vector<graph_node_t>* /*out*/) noexcept {
  return unsupported;
}

// Note [check() and out_of_memory]
// check() throws cuda_error for every failure, out_of_memory included. It cannot build a useful
// streampool::out_of_memory itself: that exception's message must say what the allocator holds,
// which only the caller knows (docs/reliability.md). So callers that can run out of memory
// test for status::out_of_memory first and throw their own; an OOM reaching check() is a call
// that was not expected to allocate, and is reported as the driver error it is.
void check(const driver& drv, drv_result result, std::string_view what) {
  if (result.ok()) {
    return;
  }
  std::string message;
  message.reserve(what.size() + 64);
  message.append(what);
  message.append(" failed: ");
  message.append(drv.describe(result));
  throw cuda_error(std::move(message), result.native);
}

}  // namespace streampool
