// sim_state.hpp (internal) — the simulated device's state, `sim_driver::state`: the parts of the
// model (streams and events, captures, cudaMalloc'd memory, pools, VMM, graphs, contents, host
// memory, the hazard checker, fault injection), each a class of its own in streampool::sim, and
// the one mutex that guards them all (Note [Sim calls] in sim_driver.cpp). The sim_driver calls
// in the sim_*.cpp files check their arguments and delegate to these parts.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "driver/sim_capture.hpp"
#include "driver/sim_common.hpp"
#include "driver/sim_contents.hpp"
#include "driver/sim_faults.hpp"
#include "driver/sim_graphs.hpp"
#include "driver/sim_hazards.hpp"
#include "driver/sim_host.hpp"
#include "driver/sim_mallocs.hpp"
#include "driver/sim_pools.hpp"
#include "driver/sim_streams.hpp"
#include "driver/sim_vmm.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {

struct sim_driver::state {
  explicit state(const sim_options& options);

  const sim_options& options_;
  const std::uint64_t serial_;  ///< identifies this instance in the per-thread current devices
  mutable std::mutex mutex_;
  sim::fault_injector faults_;
  sim::stream_model streams_;
  sim::capture_model captures_{streams_};
  sim::malloc_heap mallocs_;
  sim::pool_space pools_;
  sim::vmm_space vmm_;
  sim::graph_book graphs_;
  /// Memory contents written by memset_async / write_bytes (Note [Sim memory contents]).
  sim::contents_map contents_;
  /// Pinned host memory (sim_host.cpp).
  sim::host_memory host_;
  /// Last uses of device memory by streams (Note [Sim hazard checker], sim_hazards.cpp).
  sim::hazard_tracker hazards_;

  /// Counts the call, applies fault injection, runs `body` under the mutex. See Note [Sim calls].
  template <class Body>
  drv_result run(std::array<std::atomic<std::uint64_t>, driver_call_count>& counters, driver_call call,
                 Body&& body) noexcept {
    counters[static_cast<std::size_t>(call)].fetch_add(1, std::memory_order_relaxed);
    try {
      const std::lock_guard lock(mutex_);
      return faults_.apply(call, body);
    } catch (...) {
      return sim::fail(status::other, sim::reason_host_exception);
    }
  }

  [[nodiscard]] int device_count() const noexcept { return options_.device_count; }
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
  /// VMM pages), or -1 (sim_check_ops.cpp).
  [[nodiscard]] int device_of_range(std::uintptr_t addr, std::size_t bytes) const noexcept;
};

}  // namespace streampool
