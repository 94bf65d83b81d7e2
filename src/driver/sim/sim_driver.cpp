// sim_driver.cpp — the simulated device's facade: construction, the test controls, and every
// `driver` call as a delegation to sim_driver::state (sim_state.hpp): counted calls go through
// state::run (Note [Sim calls]) to the call class of their part (sim_*_calls.cpp), which acts on
// the device model (sim_device.hpp). docs/driver.md describes the model.
#include <string>
#include <vector>

#include "driver/sim/sim_ipc.hpp"
#include "driver/sim/sim_state.hpp"
#include "streampool/errors.hpp"

namespace streampool {

sim_driver::sim_driver(sim_options options) : options_(std::move(options)) {
  if (options_.device_count < 0 || options_.device_count > sim::max_devices) {
    throw error("sim_options.device_count must be in [0, " + std::to_string(sim::max_devices) + "], got " +
                std::to_string(options_.device_count));
  }
  const std::size_t granularity = options_.vmm_granularity;
  if (options_.vmm_supported && (granularity < sim::malloc_alignment || (granularity & (granularity - 1)) != 0)) {
    throw error("sim_options.vmm_granularity must be a power of two >= 512, got " + std::to_string(granularity));
  }
  state_ = std::make_unique<state>(options_, counters_);
}

sim_driver::~sim_driver() = default;

// --- test controls -----------------------------------------------------------------------------

void sim_driver::set_eager(bool eager) {
  const std::lock_guard lock(state_->device.mutex_);
  state_->device.streams_.set_eager(eager);
}

void sim_driver::complete(stream_t stream) { state_->streams.complete(stream); }

void sim_driver::complete_to(stream_t stream, std::uint64_t work) { state_->streams.complete_to(stream, work); }

void sim_driver::complete_all() {
  const std::lock_guard lock(state_->device.mutex_);
  state_->device.streams_.complete_all();
}

void sim_driver::set_capture(stream_t stream, capture_status status, std::uint64_t capture_id) {
  state_->streams.set_capture(stream, status, capture_id);
}

void sim_driver::fail_next(driver_call call, int count, status code, int skip) {
  if (call >= driver_call::count_ || count < 0 || skip < 0 || code == status::ok) {
    throw error("sim_driver::fail_next: bad call, count, skip or status");
  }
  const std::lock_guard lock(state_->device.mutex_);
  state_->device.faults_.arm(call, count, code, skip);
}

void sim_driver::clear_faults() {
  const std::lock_guard lock(state_->device.mutex_);
  state_->device.faults_.clear();
}

void sim_driver::set_call_gate(driver_call call, std::function<void()> gate) {
  state_->set_gate(call, std::move(gate));
}

std::uint64_t sim_driver::calls(driver_call call) const noexcept {
  return call < driver_call::count_ ? counters_[static_cast<std::size_t>(call)].load(std::memory_order_relaxed) : 0;
}

void sim_driver::reset_counters() noexcept {
  for (auto& counter : counters_) {
    counter.store(0, std::memory_order_relaxed);
  }
}

std::size_t sim_driver::bytes_in_use(int device) const {
  const std::lock_guard lock(state_->device.mutex_);
  if (!state_->device.check_device(device).ok()) {
    throw error("sim_driver::bytes_in_use: no device " + std::to_string(device));
  }
  return state_->device.in_use(device);
}

std::size_t sim_driver::live_graphs() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.graphs_.live_graphs();
}

std::size_t sim_driver::live_graph_execs() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.graphs_.live_execs();
}

std::uint64_t sim_driver::destroyed_stream_uses() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.streams_.destroyed_uses();
}

void sim_driver::write_bytes(void* ptr, const void* data, std::size_t bytes) {
  state_->contents.write_bytes(ptr, data, bytes);
}

std::vector<std::uint8_t> sim_driver::read_bytes(const void* ptr, std::size_t bytes) const {
  return state_->contents.read_bytes(ptr, bytes);
}

std::size_t sim_driver::host_bytes_pinned() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.host_.pinned();
}

std::size_t sim_driver::live_host_allocs() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.host_.allocs();
}

std::size_t sim_driver::live_host_registrations() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.host_.registrations();
}

std::uint64_t sim_driver::submitted_work(stream_t stream) const { return state_->streams.submitted_work(stream); }

std::uint64_t sim_driver::completed_work(stream_t stream) const { return state_->streams.completed_work(stream); }

bool sim_driver::use(stream_t stream, const void* ptr, std::size_t bytes) {
  return state_->contents.use(stream, ptr, bytes);
}

void sim_driver::wait_for(stream_t waiter, stream_t on) { state_->streams.wait_for(waiter, on); }

std::uint64_t sim_driver::hazard_violations() const {
  const std::lock_guard lock(state_->device.mutex_);
  return state_->device.hazards_.violations() + state_->device.physical_hazards_.violations();
}

std::vector<std::string> sim_driver::hazard_reports() const {
  const std::lock_guard lock(state_->device.mutex_);
  std::vector<std::string> reports = state_->device.hazards_.descriptions();
  const std::vector<std::string>& physical = state_->device.physical_hazards_.descriptions();
  reports.insert(reports.end(), physical.begin(), physical.end());
  return reports;
}

void sim_driver::clear_hazard_violations() {
  const std::lock_guard lock(state_->device.mutex_);
  state_->device.hazards_.clear_violations();
  state_->device.physical_hazards_.clear_violations();
}

std::string sim_driver::describe(drv_result result) const { return state_->device.describe(result); }

// --- devices -------------------------------------------------------------------------------------

// device_count, get_device, set_device and get_device_info have no driver_call: they are not
// counted and faults cannot be injected into them. They touch only what is fixed at construction
// and thread-local data: no mutex, so the per-allocation "which device am I on?" query stays cheap.
drv_result sim_driver::device_count(int* count) noexcept {
  *count = state_->device.device_count();  // fixed at construction
  return *count == 0 ? sim::fail(status::no_device) : drv_result{};
}

drv_result sim_driver::get_device(int* device) noexcept {
  if (state_->device.device_count() == 0) {
    return sim::fail(status::no_device);
  }
  *device = state_->device.streams_.current_device();
  return {};
}

drv_result sim_driver::set_device(int device) noexcept {
  if (const drv_result bad = state_->device.check_device(device); !bad.ok()) {
    return bad;
  }
  try {
    state_->device.streams_.set_current_device(device);
  } catch (...) {
    return sim::fail(status::other, sim::reason_host_exception);
  }
  return {};
}

drv_result sim_driver::get_device_info(int device, device_info* out) noexcept {
  return state_->device.get_device_info(device, out);
}

// --- counted calls: stream_calls, pool_calls, graph_calls, memory_calls, content_calls -------------

drv_result sim_driver::stream_create(int device, stream_t* out) noexcept {
  return state_->run(driver_call::stream_create, [&] { return state_->streams.stream_create(device, out); });
}

drv_result sim_driver::stream_destroy(int device, stream_t stream) noexcept {
  return state_->run(driver_call::stream_destroy, [&] { return state_->streams.stream_destroy(device, stream); });
}

drv_result sim_driver::stream_synchronize(int device, stream_t stream) noexcept {
  return state_->run(driver_call::stream_synchronize, [&] {
    return state_->streams.stream_synchronize(device, stream);
  });
}

drv_result sim_driver::stream_wait_event(stream_t stream, event_t event) noexcept {
  return state_->run(driver_call::stream_wait_event, [&] { return state_->streams.stream_wait_event(stream, event); });
}

drv_result sim_driver::stream_capture_info(stream_t stream, capture_info* out) noexcept {
  return state_->run(driver_call::stream_capture_info, [&] {
    return state_->streams.stream_capture_info(stream, out);
  });
}

drv_result sim_driver::stream_get_device(stream_t stream, int* device) noexcept {
  return state_->run(driver_call::stream_get_device, [&] { return state_->streams.stream_get_device(stream, device); });
}

drv_result sim_driver::device_synchronize(int device) noexcept {
  return state_->run(driver_call::device_synchronize, [&] { return state_->streams.device_synchronize(device); });
}

drv_result sim_driver::event_create(int device, event_t* out) noexcept {
  return state_->run(driver_call::event_create, [&] { return state_->streams.event_create(device, out); });
}

drv_result sim_driver::event_destroy(int device, event_t event) noexcept {
  return state_->run(driver_call::event_destroy, [&] { return state_->streams.event_destroy(device, event); });
}

drv_result sim_driver::event_record(event_t event, stream_t stream) noexcept {
  return state_->run(driver_call::event_record, [&] { return state_->streams.event_record(event, stream); });
}

drv_result sim_driver::event_query(event_t event) noexcept {
  return state_->run(driver_call::event_query, [&] { return state_->streams.event_query(event); });
}

drv_result sim_driver::event_synchronize(event_t event) noexcept {
  return state_->run(driver_call::event_synchronize, [&] { return state_->streams.event_synchronize(event); });
}

drv_result sim_driver::pool_get_default(int device, mempool_t* out) noexcept {
  return state_->run(driver_call::pool_get_default, [&] { return state_->pools.pool_get_default(device, out); });
}

drv_result sim_driver::pool_create(int device, mempool_t* out) noexcept {
  return state_->run(driver_call::pool_create, [&] { return state_->pools.pool_create(device, out); });
}

drv_result sim_driver::pool_destroy(mempool_t pool) noexcept {
  return state_->run(driver_call::pool_destroy, [&] { return state_->pools.pool_destroy(pool); });
}

drv_result sim_driver::pool_set_attr(mempool_t pool, pool_attr attr, std::uint64_t value) noexcept {
  return state_->run(driver_call::pool_set_attr, [&] { return state_->pools.pool_set_attr(pool, attr, value); });
}

drv_result sim_driver::pool_get_attr(mempool_t pool, pool_attr attr, std::uint64_t* value) noexcept {
  return state_->run(driver_call::pool_get_attr, [&] { return state_->pools.pool_get_attr(pool, attr, value); });
}

drv_result sim_driver::pool_set_access(mempool_t pool, int peer_device, bool enable) noexcept {
  return state_->run(driver_call::pool_set_access, [&] {
    return state_->pools.pool_set_access(pool, peer_device, enable);
  });
}

drv_result sim_driver::pool_trim_to(mempool_t pool, std::size_t keep_bytes) noexcept {
  return state_->run(driver_call::pool_trim_to, [&] { return state_->pools.pool_trim_to(pool, keep_bytes); });
}

drv_result sim_driver::malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out) noexcept {
  return state_->run(driver_call::malloc_async, [&] { return state_->pools.malloc_async(pool, bytes, stream, out); });
}

drv_result sim_driver::free_async(void* ptr, stream_t stream) noexcept {
  return state_->run(driver_call::free_async, [&] { return state_->pools.free_async(ptr, stream); });
}

drv_result sim_driver::stream_begin_capture(stream_t stream, capture_mode mode) noexcept {
  return state_->run(driver_call::stream_begin_capture, [&] {
    return state_->graphs.stream_begin_capture(stream, mode);
  });
}

drv_result sim_driver::stream_end_capture(stream_t stream, graph_t* out) noexcept {
  return state_->run(driver_call::stream_end_capture, [&] { return state_->graphs.stream_end_capture(stream, out); });
}

drv_result sim_driver::capture_on_graph_release(stream_t stream, void (*on_release)(void*), void* arg) noexcept {
  return state_->run(driver_call::capture_on_graph_release, [&] {
    return state_->graphs.capture_on_graph_release(stream, on_release, arg);
  });
}

drv_result sim_driver::capture_dependencies(stream_t stream, std::vector<graph_node_t>* out) noexcept {
  return state_->run(driver_call::capture_dependencies, [&] { return state_->graphs.capture_dependencies(stream, out); });
}

drv_result sim_driver::graph_node_dependencies(graph_node_t node, std::vector<graph_node_t>* out) noexcept {
  return state_->run(driver_call::graph_node_dependencies,
                     [&] { return state_->graphs.graph_node_dependencies(node, out); });
}

drv_result sim_driver::graph_instantiate(graph_t graph, graph_exec_t* out, instantiate_flags flags) noexcept {
  return state_->run(driver_call::graph_instantiate, [&] {
    return state_->graphs.graph_instantiate(graph, out, flags);
  });
}

drv_result sim_driver::graph_launch(graph_exec_t exec, stream_t stream) noexcept {
  return state_->run(driver_call::graph_launch, [&] { return state_->graphs.graph_launch(exec, stream); });
}

drv_result sim_driver::graph_exec_destroy(graph_exec_t exec) noexcept {
  return state_->run(driver_call::graph_exec_destroy, [&] { return state_->graphs.graph_exec_destroy(exec); });
}

drv_result sim_driver::graph_destroy(graph_t graph) noexcept {
  return state_->run(driver_call::graph_destroy, [&] { return state_->graphs.graph_destroy(graph); });
}

drv_result sim_driver::graph_mem_trim(int device) noexcept {
  return state_->run(driver_call::graph_mem_trim, [&] { return state_->graphs.graph_mem_trim(device); });
}

drv_result sim_driver::mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  return state_->run(driver_call::mem_get_info, [&] {
    return state_->memory.mem_get_info(device, free_bytes, total_bytes);
  });
}

drv_result sim_driver::malloc(int device, std::size_t bytes, void** out) noexcept {
  return state_->run(driver_call::malloc, [&] { return state_->memory.malloc(device, bytes, out); });
}

drv_result sim_driver::free(int device, void* ptr) noexcept {
  return state_->run(driver_call::free, [&] { return state_->memory.free(device, ptr); });
}

drv_result sim_driver::vmm_reserve(int device, std::size_t bytes, std::size_t alignment, void** va) noexcept {
  return state_->run(driver_call::vmm_reserve, [&] {
    return state_->memory.vmm_reserve(device, bytes, alignment, va);
  });
}

drv_result sim_driver::vmm_create(int device, std::size_t bytes, vmm_handle_t* out) noexcept {
  return state_->run(driver_call::vmm_create, [&] { return state_->memory.vmm_create(device, bytes, out); });
}

drv_result sim_driver::vmm_release(vmm_handle_t handle) noexcept {
  return state_->run(driver_call::vmm_release, [&] { return state_->memory.vmm_release(handle); });
}

drv_result sim_driver::vmm_set_access(void* va, std::size_t bytes, int device) noexcept {
  return state_->run(driver_call::vmm_set_access, [&] { return state_->memory.vmm_set_access(va, bytes, device); });
}

drv_result sim_driver::vmm_unmap(void* va, std::size_t bytes) noexcept {
  return state_->run(driver_call::vmm_unmap, [&] { return state_->memory.vmm_unmap(va, bytes); });
}

drv_result sim_driver::host_free(void* ptr) noexcept {
  return state_->run(driver_call::host_free, [&] { return state_->memory.host_free(ptr); });
}

drv_result sim_driver::memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) noexcept {
  return state_->run(driver_call::memcpy_async, [&] { return state_->memory.memcpy_async(dst, src, bytes, stream); });
}

drv_result sim_driver::memset_async(int device, void* ptr, std::uint8_t value, std::size_t bytes,
                                    stream_t stream) noexcept {
  return state_->run(driver_call::memset_async, [&] {
    return state_->contents.memset_async(device, ptr, value, bytes, stream);
  });
}

drv_result sim_driver::check_bytes(int device, const void* ptr, std::size_t bytes, std::uint8_t expected,
                                   stream_t stream, byte_check* out) noexcept {
  return state_->run(driver_call::check_bytes, [&] {
    return state_->contents.check_bytes(device, ptr, bytes, expected, stream, out);
  });
}

// These go straight to their part: nothing to check beyond what the part checks.

drv_result sim_driver::vmm_free(void* va, std::size_t bytes) noexcept {
  return state_->run(driver_call::vmm_free, [&] { return state_->device.vmm_.free(va, bytes); });
}

drv_result sim_driver::vmm_map(void* va, std::size_t bytes, vmm_handle_t handle) noexcept {
  return state_->run(driver_call::vmm_map, [&] { return state_->device.vmm_.map(va, bytes, handle); });
}

drv_result sim_driver::vmm_export_fd(vmm_handle_t handle, int* fd) noexcept {
  return state_->run(driver_call::vmm_export_fd, [&] { return state_->device.vmm_.export_fd(handle, fd); });
}

drv_result sim_driver::vmm_import_fd(int fd, vmm_handle_t* out) noexcept {
  return state_->run(driver_call::vmm_import_fd, [&] { return state_->memory.vmm_import_fd(fd, out); });
}

drv_result sim_driver::vmm_retain(void* va, vmm_handle_t* out) noexcept {
  return state_->run(driver_call::vmm_retain, [&] { return state_->device.vmm_.retain(va, out); });
}

std::size_t sim_driver::live_shared_memory() noexcept { return sim::live_shared_memory(); }

drv_result sim_driver::host_alloc(std::size_t bytes, void** out) noexcept {
  *out = nullptr;
  return state_->run(driver_call::host_alloc, [&] { return state_->device.host_.alloc(bytes, out); });
}

drv_result sim_driver::host_register(void* ptr, std::size_t bytes) noexcept {
  return state_->run(driver_call::host_register, [&] { return state_->device.host_.register_range(ptr, bytes); });
}

drv_result sim_driver::host_unregister(void* ptr) noexcept {
  return state_->run(driver_call::host_unregister, [&] { return state_->device.host_.unregister_range(ptr); });
}

// Not counted (it has no driver_call). Capture state and its rules are capture_model's
// (sim_capture.cpp, Note [Sim capture sequences]).
drv_result sim_driver::thread_exchange_capture_mode(capture_mode* mode) noexcept {
  if (mode == nullptr) return sim::fail(status::invalid_value);
  *mode = sim::capture_model::exchange_thread_mode(*mode);
  return drv_result{};
}

}  // namespace streampool
