// device_context.hpp — what the arenas and the segment source of one device share and read
// without the device mutex: the driver and device index, the config and size policy, the event
// pool, the trace ring, the device peaks and a few counters. Owned by device_state (which
// outlives every arena and its segment source); nothing here knows the arenas' owner.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/event_pool.hpp"
#include "core/trace_ring.hpp"
#include "native/arena_stats.hpp"
#include "native/size_rounding.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"

namespace streampool::native {

struct device_context {
  /// `captures_underway` and `deferred_blocks` are device_state's capture counters (its
  /// routes decide them; Note [Deferred frees during capture] in native_allocator.hpp).
  device_context(driver& driver_ref, int device, const allocator_config& config_ref, const size_policy& policy_ref,
                 const std::atomic<std::uint32_t>& captures, std::atomic<std::uint32_t>& deferred)
      : drv(&driver_ref),
        index(device),
        config(&config_ref),
        policy(&policy_ref),
        events(driver_ref, device),
        captures_underway(&captures),
        deferred_blocks(&deferred) {}
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;

  /// True while any begin_allocate_to_pool is active on the device: no event queries, no frees.
  [[nodiscard]] bool capture_underway() const noexcept {
    return captures_underway->load(std::memory_order_relaxed) != 0;
  }

  driver* drv;
  int index;
  const allocator_config* config;
  const size_policy* policy;
  detail::event_pool events;
  detail::trace_ring trace;
  device_peaks peaks;
  std::atomic<std::uint64_t> pending_events{0};  ///< outstanding events of all arenas
  std::atomic<std::uint64_t> gc_clock{0};        ///< large-pool searches while GC is on (spec §2.11)
  std::atomic<bool> gc_enabled{false};           ///< a fraction cap and a GC threshold are set
  const std::atomic<std::uint32_t>* captures_underway;
  std::atomic<std::uint32_t>* deferred_blocks;   ///< blocks parked by frees during a capture
};

}  // namespace streampool::native
