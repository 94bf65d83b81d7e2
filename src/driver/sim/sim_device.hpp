// sim_device.hpp (internal) — the simulated device (device_model): the parts of the model
// (streams and events, captures, cudaMalloc'd memory, pools, VMM, graphs, contents, host memory,
// the hazard checker, fault injection), each a class of its own in streampool::sim, the one mutex
// that guards them all (Note [Sim calls] in sim_state.hpp), and the queries that span parts
// (device checks, memory in use, which device owns a range). The call classes (sim_*_calls.hpp)
// implement the driver calls on it; sim_driver is their facade.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "driver/sim/sim_capture.hpp"
#include "driver/sim/sim_common.hpp"
#include "driver/sim/sim_contents.hpp"
#include "driver/sim/sim_faults.hpp"
#include "driver/sim/sim_graphs.hpp"
#include "driver/sim/sim_hazards.hpp"
#include "driver/sim/sim_host.hpp"
#include "driver/sim/sim_mallocs.hpp"
#include "driver/sim/sim_pools.hpp"
#include "driver/sim/sim_streams.hpp"
#include "driver/sim/sim_vmm.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool::sim {

class device_model {
 public:
  /// The parts sized by `options` (kept by reference: the sim_driver owns them).
  explicit device_model(const sim_options& options);

  const sim_options& options_;
  const std::uint64_t serial_;  ///< identifies this instance in the per-thread current devices
  mutable std::mutex mutex_;
  fault_injector faults_;
  stream_model streams_;
  capture_model captures_{streams_};
  malloc_heap mallocs_;
  pool_space pools_;
  vmm_space vmm_;
  graph_book graphs_;
  /// Memory contents written by memset_async / write_bytes (Note [Sim memory contents]).
  contents_map contents_;
  /// Pinned host memory (sim_host.cpp).
  host_memory host_;
  /// Last uses of device memory by streams (Note [Sim hazard checker], sim_hazards.cpp).
  hazard_tracker hazards_;
  /// The same for the physical pages behind VMM mappings (Note [Sim aliased mappings]).
  hazard_tracker physical_hazards_;

  [[nodiscard]] int device_count() const noexcept { return options_.device_count; }
  /// ok, or status::no_device / status::invalid_device for a device this sim does not have.
  [[nodiscard]] drv_result check_device(int device) const noexcept;
  /// Device memory in use on `device`: malloc'd + pool-reserved + VMM physical bytes.
  [[nodiscard]] std::size_t in_use(int device) const noexcept {
    return mallocs_.bytes(device) + pools_.bytes(device) + vmm_.bytes(device);
  }
  /// Capacity of `device` not in use.
  [[nodiscard]] std::size_t available(int device) const noexcept {
    return options_.capacity - std::min(in_use(device), options_.capacity);
  }
  /// The device whose memory holds all of [addr, addr + bytes) (malloc'd, a pool range or mapped
  /// VMM pages), or -1.
  [[nodiscard]] int device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept;

  /// sim_driver::describe: the status with the reason of Note [Sim native codes] (takes the mutex).
  [[nodiscard]] std::string describe(drv_result result) const;
  /// sim_driver::get_device_info (no mutex: only what is fixed at construction).
  [[nodiscard]] drv_result get_device_info(int device, device_info* out) const noexcept;
};

}  // namespace streampool::sim
