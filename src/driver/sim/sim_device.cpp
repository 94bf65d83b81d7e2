// sim_device.cpp — the simulated device's parts put together (device_model): construction from
// sim_options, the device check every call makes, which device owns a range of memory, describe()
// and the static device facts of get_device_info.
#include <atomic>
#include <cstdio>
#include <string>

#include "driver/sim/sim_device.hpp"

namespace streampool::sim {

namespace {

std::atomic<std::uint64_t> next_serial{1};

}  // namespace

device_model::device_model(const sim_options& options)
    : options_(options), serial_(next_serial.fetch_add(1, std::memory_order_relaxed)),
      streams_(serial_, options.eager_completion), mallocs_(options.device_count, options.malloc_addresses),
      pools_(options.device_count, options.memory_pools_supported, options.capacity),
      vmm_(options.device_count, options.vmm_granularity), host_(options.host_capacity),
      hazards_(options.abort_on_hazard),
      physical_hazards_(options.abort_on_hazard) {
  for (int device = 0; device < options.device_count; ++device) {
    streams_.add_device();
  }
}

drv_result device_model::check_device(int device) const noexcept {
  if (device_count() == 0) {
    return fail(status::no_device);
  }
  if (device < 0 || device >= device_count()) {
    return fail(status::invalid_device);
  }
  return {};
}

int device_model::device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept {
  const std::uintptr_t end = addr + bytes;
  if (bytes == 0 || end < addr) return -1;
  if (const int device = mallocs_.device_of_range(addr, bytes); device >= 0) return device;
  if (const int device = pools_.device_of_range(addr, bytes); device >= 0) return device;
  return vmm_.device_of_range(addr, bytes);
}

std::string device_model::describe(drv_result result) const {
  std::string text = "sim: ";
  text += to_string(result.code);
  const int reason = result.native & reason_mask;
  if (reason == reason_injected) {
    text += " (injected fault)";
  } else if (reason == reason_address_space) {
    text += " (simulated address space exhausted)";
  } else if (reason == reason_host_exception) {
    text += " (host exception inside the simulator)";
  } else if (reason == reason_host_capacity) {
    std::size_t pinned = 0;
    {
      const std::lock_guard lock(mutex_);
      pinned = host_.pinned();
    }
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, " (simulated host: %.2f GiB pinnable, %.2f GiB pinned)",
                  double(options_.host_capacity) / double(gib), double(pinned) / double(gib));
    text += buffer;
  } else if (reason == reason_destroyed_stream) {
    text += " (use of a destroyed stream; the real driver answers cudaErrorDeviceUninitialized "
            "\"invalid device context\" or crashes)";
  } else if (result.code == status::out_of_memory && (result.native >> 16) > 0) {
    const int device = (result.native >> 16) - 1;
    std::size_t used = 0;
    {
      const std::lock_guard lock(mutex_);
      if (device < device_count()) {
        used = in_use(device);
      }
    }
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, " (device %d: %.2f GiB capacity, %.2f GiB in use)", device,
                  double(options_.capacity) / double(gib), double(used) / double(gib));
    text += buffer;
  }
  return text;
}

drv_result device_model::get_device_info(int device, device_info* out) const noexcept {
  if (const drv_result bad = check_device(device); !bad.ok()) {
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
    out->vmm_ipc_supported = options_.vmm_supported && options_.vmm_ipc_supported;
  } catch (...) {
    return fail(status::other, reason_host_exception);
  }
  return {};
}

}  // namespace streampool::sim
