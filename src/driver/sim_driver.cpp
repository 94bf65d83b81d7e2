// sim_driver.cpp — the simulated device's facade: construction, the test controls (completion,
// capture scripting, fault injection, counters), describe(), devices and plain malloc/free. The
// model's parts are classes of streampool::sim held by sim_driver::state (sim_state.hpp); the
// other calls are in the sim_*.cpp file of their part. docs/driver.md describes the model.
#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver/sim_state.hpp"
#include "streampool/errors.hpp"

namespace streampool {

namespace {

std::atomic<std::uint64_t> next_serial{1};

}  // namespace

// Note [Sim calls]
// Every driver call goes through state::run: the counter is bumped first (so failed and injected
// calls count), then, under the one mutex, an armed fault for the call fires (the call then does
// nothing at all, not even validation), and otherwise the body runs. `skip` counts down only on
// calls that succeed. A host exception (std::bad_alloc) inside the body becomes status::other
// rather than escaping a noexcept function. One mutex is enough: calls are O(1) or O(log n),
// apart from synchronisation points, which touch every stream or pool of a device.
sim_driver::state::state(const sim_options& options)
    : options_(options), serial_(next_serial.fetch_add(1, std::memory_order_relaxed)),
      streams_(serial_, options.eager_completion), mallocs_(options.device_count, options.malloc_addresses),
      pools_(options.device_count, options.memory_pools_supported, options.capacity),
      vmm_(options.device_count, options.vmm_granularity), host_(options.host_capacity), hazards_(options.abort_on_hazard) {
  for (int device = 0; device < options.device_count; ++device) {
    streams_.add_device();
  }
}

drv_result sim_driver::state::check_device(int device) const noexcept {
  if (device_count() == 0) {
    return sim::fail(status::no_device);
  }
  if (device < 0 || device >= device_count()) {
    return sim::fail(status::invalid_device);
  }
  return {};
}

sim_driver::sim_driver(sim_options options) : options_(std::move(options)) {
  if (options_.device_count < 0 || options_.device_count > sim::max_devices) {
    throw error("sim_options.device_count must be in [0, " + std::to_string(sim::max_devices) + "], got " +
                std::to_string(options_.device_count));
  }
  const std::size_t granularity = options_.vmm_granularity;
  if (options_.vmm_supported && (granularity < sim::malloc_alignment || (granularity & (granularity - 1)) != 0)) {
    throw error("sim_options.vmm_granularity must be a power of two >= 512, got " + std::to_string(granularity));
  }
  state_ = std::make_unique<state>(options_);
}

sim_driver::~sim_driver() = default;

// --- test controls -----------------------------------------------------------------------------

void sim_driver::set_eager(bool eager) {
  const std::lock_guard lock(state_->mutex_);
  state_->streams_.set_eager(eager);
}

void sim_driver::complete(stream_t stream) {
  const std::lock_guard lock(state_->mutex_);
  const std::uint32_t index = state_->streams_.find_stream(stream);
  if (index == sim::no_stream) {
    throw error("sim_driver::complete: unknown or destroyed stream");
  }
  state_->streams_.complete_stream(index);
}

void sim_driver::complete_all() {
  const std::lock_guard lock(state_->mutex_);
  state_->streams_.complete_all();
}

void sim_driver::set_capture(stream_t stream, capture_status status, std::uint64_t capture_id) {
  const std::lock_guard lock(state_->mutex_);
  const std::uint32_t index = state_->streams_.find_stream(stream);
  if (index == sim::no_stream) {
    throw error("sim_driver::set_capture: unknown or destroyed stream");
  }
  state_->captures_.leave(index);
  if (status == capture_status::active) {
    state_->captures_.enter(index, capture_id, /*strict=*/true, /*begun=*/false, /*origin=*/false);
  } else if (status == capture_status::invalidated) {
    state_->streams_[index].capture = status;
    state_->streams_[index].capture_id = capture_id;
  }
}

void sim_driver::fail_next(driver_call call, int count, status code, int skip) {
  if (call >= driver_call::count_ || count < 0 || skip < 0 || code == status::ok) {
    throw error("sim_driver::fail_next: bad call, count, skip or status");
  }
  const std::lock_guard lock(state_->mutex_);
  state_->faults_.arm(call, count, code, skip);
}

void sim_driver::clear_faults() {
  const std::lock_guard lock(state_->mutex_);
  state_->faults_.clear();
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
  const std::lock_guard lock(state_->mutex_);
  if (!state_->check_device(device).ok()) {
    throw error("sim_driver::bytes_in_use: no device " + std::to_string(device));
  }
  return state_->in_use(device);
}

std::string sim_driver::describe(drv_result result) const {
  std::string text = "sim: ";
  text += to_string(result.code);
  const int reason = result.native & sim::reason_mask;
  if (reason == sim::reason_injected) {
    text += " (injected fault)";
  } else if (reason == sim::reason_address_space) {
    text += " (simulated address space exhausted)";
  } else if (reason == sim::reason_host_exception) {
    text += " (host exception inside the simulator)";
  } else if (reason == sim::reason_host_capacity) {
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, " (simulated host: %.2f GiB pinnable, %.2f GiB pinned)",
                  double(options_.host_capacity) / double(gib), double(host_bytes_pinned()) / double(gib));
    text += buffer;
  } else if (reason == sim::reason_destroyed_stream) {
    text += " (use of a destroyed stream; the real driver answers cudaErrorDeviceUninitialized "
            "\"invalid device context\" or crashes)";
  } else if (result.code == status::out_of_memory && (result.native >> 16) > 0) {
    const int device = (result.native >> 16) - 1;
    std::size_t in_use = 0;
    {
      const std::lock_guard lock(state_->mutex_);
      if (device < state_->device_count()) {
        in_use = state_->in_use(device);
      }
    }
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, " (device %d: %.2f GiB capacity, %.2f GiB in use)", device,
                  double(options_.capacity) / double(gib), double(in_use) / double(gib));
    text += buffer;
  }
  return text;
}

// --- devices -------------------------------------------------------------------------------------

// device_count, get_device, set_device and get_device_info have no driver_call: they are not
// counted and faults cannot be injected into them.
drv_result sim_driver::device_count(int* count) noexcept {
  *count = state_->device_count();  // fixed at construction
  return *count == 0 ? sim::fail(status::no_device) : drv_result{};
}

// These four touch only what is fixed at construction and thread-local data: no mutex, so the
// per-allocation "which device am I on?" query stays cheap.
drv_result sim_driver::get_device(int* device) noexcept {
  if (state_->device_count() == 0) {
    return sim::fail(status::no_device);
  }
  *device = state_->streams_.current_device();
  return {};
}

drv_result sim_driver::set_device(int device) noexcept {
  if (const drv_result bad = state_->check_device(device); !bad.ok()) {
    return bad;
  }
  try {
    state_->streams_.set_current_device(device);
  } catch (...) {
    return sim::fail(status::other, sim::reason_host_exception);
  }
  return {};
}

drv_result sim_driver::get_device_info(int device, device_info* out) noexcept {
  if (const drv_result bad = state_->check_device(device); !bad.ok()) {
    return bad;
  }
  try {
    out->ordinal = device;
    out->name = options_.device_name;
    out->total_memory = options_.capacity;
    out->compute_major = 9;  // the sim stands in for the H200 of the GPU machine
    out->compute_minor = 0;
    out->memory_pools_supported = options_.memory_pools_supported;
    out->vmm_supported = options_.vmm_supported;
    out->vmm_granularity = options_.vmm_supported ? options_.vmm_granularity : 0;
  } catch (...) {
    return sim::fail(status::other, sim::reason_host_exception);
  }
  return {};
}

drv_result sim_driver::mem_get_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  return state_->run(counters_, driver_call::mem_get_info, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    *total_bytes = options_.capacity;
    *free_bytes = state_->available(device);
    return drv_result{};
  });
}

// --- plain device memory ---------------------------------------------------------------------

// Note [Sim malloc accounting] (sim_mallocs.cpp) gives the alignment and charging.
drv_result sim_driver::malloc(int device, std::size_t bytes, void** out) noexcept {
  return state_->run(counters_, driver_call::malloc, [&] {
    *out = nullptr;
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (state_->captures_.refuses_unsafe()) {  // Note [Relaxed uncaptured calls]
      return state_->captures_.refuse();
    }
    if (bytes == 0) {
      return drv_result{};
    }
    return state_->mallocs_.allocate(device, bytes, options_.capacity, state_->available(device), out);
  });
}

drv_result sim_driver::free(int device, void* ptr) noexcept {
  return state_->run(counters_, driver_call::free, [&] {
    if (const drv_result bad = state_->check_device(device); !bad.ok()) {
      return bad;
    }
    if (state_->captures_.active() > 0) {
      return state_->captures_.refuse();
    }
    if (ptr == nullptr) {
      return drv_result{};
    }
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    const sim::malloc_heap::range_rec* found = state_->mallocs_.find(addr);
    if (found == nullptr || found->device != device) {
      return sim::fail(status::invalid_value);
    }
    state_->streams_.complete_device(device);  // cudaFree synchronises the device
    state_->hazards_.retire(state_->streams_.records(), addr, found->size, "cudaFree");  // Note [Sim hazard checker]
    if (!state_->contents_.empty()) {
      state_->contents_.write(addr, found->size, 0);  // Note [Sim memory contents]
    }
    state_->mallocs_.release(addr);
    return drv_result{};
  });
}

}  // namespace streampool
