// oom_reporter.hpp — the out-of-memory error of one device of the cudaMallocAsync backend: the
// figures read from the device's parts (pool, private pools, accounting, cap, parked frees) into
// the shared OOM message, plus what the backend already tried (Note [OOM figures of the
// cudaMallocAsync backend] in oom_reporter.cpp). Counted in num_ooms and traced as `oom`. The
// device calls it under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>

#include "async/async_accounting.hpp"
#include "async/async_captures.hpp"
#include "async/device_trace.hpp"
#include "core/memory_cap.hpp"
#include "async/private_pools.hpp"
#include "async/stream_ordered_pool.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/graph.hpp"

namespace streampool::async {

/// Why a request failed: the driver said out of memory, the fraction cap refused it, or it is
/// larger than the whole device (refused before the pool is asked; Note [Impossible requests] in
/// async_device.cpp).
enum class oom_cause : std::uint8_t { driver, cap, device_size };

/// A failed request as the device saw it.
struct oom_request {
  std::size_t bytes = 0;
  stream_t stream = nullptr;
  mempool_id pool;        ///< the private pool it was routed to, if any
  oom_cause cause = oom_cause::driver;
  bool retried = false;   ///< the device was synchronised, the pool trimmed and the request retried
  std::size_t held = 0;   ///< the bytes the fraction cap compares (Note [Memory fraction])
};

class oom_reporter {
 public:
  oom_reporter(driver& drv, int device, const core::memory_cap& cap, async_accounting& accounting,
               const stream_ordered_pool& pool, const private_pools& blocks, const capture_router& captures,
               device_trace trace) noexcept
      : driver_(&drv),
        device_(device),
        cap_(&cap),
        accounting_(&accounting),
        pool_(&pool),
        private_pools_(&blocks),
        captures_(&captures),
        trace_(trace) {}

  /// The error for `request`, after reading the pool's reserve into the statistics; counts it
  /// (num_ooms) and traces it.
  [[nodiscard]] out_of_memory report(const oom_request& request);

 private:
  driver* driver_;
  int device_;
  const core::memory_cap* cap_;
  async_accounting* accounting_;
  const stream_ordered_pool* pool_;
  const private_pools* private_pools_;
  const capture_router* captures_;
  device_trace trace_;
};

}  // namespace streampool::async
