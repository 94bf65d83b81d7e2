// sim_state.hpp (internal) — `sim_driver::state`, what the facade holds: the simulated device
// (device_model, sim_device.hpp) and the classes that implement its driver calls and test controls
// on it, one per part (streams and events, pools, capture and graphs, memory, contents), plus
// run(), which every counted driver call goes through (Note [Sim calls]). Each sim_driver call is
// a delegation to one of these.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "driver/sim/sim_content_calls.hpp"
#include "driver/sim/sim_device.hpp"
#include "driver/sim/sim_graph_calls.hpp"
#include "driver/sim/sim_memory_calls.hpp"
#include "driver/sim/sim_pool_calls.hpp"
#include "driver/sim/sim_stream_calls.hpp"
#include "streampool/sim_driver.hpp"

namespace streampool {

struct sim_driver::state {
  using call_counters = std::array<std::atomic<std::uint64_t>, driver_call_count>;

  state(const sim_options& options, call_counters& counters) : device(options), counters_(counters) {}

  sim::device_model device;
  sim::stream_calls streams{device};
  sim::pool_calls pools{device};
  sim::graph_calls graphs{device};
  sim::memory_calls memory{device};
  sim::content_calls contents{device};

  // Note [Sim calls]
  // Every driver call goes through run: the counter is bumped first (so failed and injected
  // calls count), then, under the one mutex, an armed fault for the call fires (the call then does
  // nothing at all, not even validation), and otherwise the body runs. `skip` counts down only on
  // calls that succeed. A host exception (std::bad_alloc) inside the body becomes status::other
  // rather than escaping a noexcept function. One mutex is enough: calls are O(1) or O(log n),
  // apart from synchronisation points, which touch every stream or pool of a device.
  template <class Body>
  drv_result run(driver_call call, Body&& body) noexcept {
    counters_[static_cast<std::size_t>(call)].fetch_add(1, std::memory_order_relaxed);
    if (gated_.load(std::memory_order_acquire)) pass_gate(call);
    try {
      const std::lock_guard lock(device.mutex_);
      return device.faults_.apply(call, body);
    } catch (...) {
      return sim::fail(status::other, sim::reason_host_exception);
    }
  }

  /// sim_driver::set_call_gate.
  void set_gate(driver_call call, std::function<void()> gate) {
    const std::lock_guard lock(gate_mutex_);
    gates_[static_cast<std::size_t>(call)] = std::move(gate);
    gated_.store(true, std::memory_order_release);
  }

 private:
  /// Runs the test's gate for `call`, if any, outside the sim's mutex (it may block).
  void pass_gate(driver_call call) noexcept {
    std::function<void()> gate;
    {
      const std::lock_guard lock(gate_mutex_);
      gate = gates_[static_cast<std::size_t>(call)];
    }
    try {
      if (gate) gate();
    } catch (...) {
      // a test hook: nothing to report through a driver result
    }
  }

  call_counters& counters_;
  std::atomic<bool> gated_{false};
  std::mutex gate_mutex_;
  std::array<std::function<void()>, driver_call_count> gates_{};
};

}  // namespace streampool
