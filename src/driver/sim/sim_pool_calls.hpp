// sim_pool_calls.hpp (internal) — the simulated pools' driver calls (pool_calls): default and
// created pools, destruction (deferred while memory is live), cudaMemPoolAttr rules for get/set,
// peer access, pool_trim_to, and malloc_async / free_async with their capture rules. The memory
// model itself (chunks, blocks, reuse) is pool_space's (sim_pools.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "driver/sim/sim_device.hpp"

namespace streampool::sim {

/// sim_driver's stream-ordered pool calls on a device_model; they run under the device's mutex
/// (sim_driver::state::run).
class pool_calls {
 public:
  explicit pool_calls(device_model& device) noexcept : device_(device) {}

  drv_result pool_get_default(int device, mempool_t* out);
  drv_result pool_create(int device, mempool_t* out);
  drv_result pool_destroy(mempool_t pool);
  drv_result pool_set_attr(mempool_t pool, pool_attr attr, std::uint64_t value);
  drv_result pool_get_attr(mempool_t pool, pool_attr attr, std::uint64_t* value);
  drv_result pool_set_access(mempool_t pool, int peer_device, bool enable);
  drv_result pool_trim_to(mempool_t pool, std::size_t keep_bytes);
  drv_result malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out);
  drv_result free_async(void* ptr, stream_t stream);

 private:
  device_model& device_;
};

}  // namespace streampool::sim
