// stream_ordered_pool.cpp — set-up, attribute reads, trim and teardown of the cudaMemPool one
// device of the cudaMallocAsync backend allocates from (stream_ordered_pool.hpp).
//
// Note [Pool setup]
// On first use of a device: refuse devices without memory pools (cudaDevAttrMemoryPoolsSupported;
// some devices lack them even on recent CUDA) with an error that names the device and the native
// backend; take the device's default pool, or create one (`async_pool:dedicated`) so that other
// users of the default pool neither see our memory nor trim it. Set the release threshold to
// UINT64_MAX — the default 0 returns every freed byte to the OS at each synchronisation, which
// defeats caching — and turn on the three reuse policies (follow event dependencies, opportunistic,
// internal dependencies), so that memory freed on one stream can serve another once ordered.
#include "async/stream_ordered_pool.hpp"

#include <limits>
#include <string>

#include "streampool/errors.hpp"

namespace streampool::async {
namespace {

void check_pool_call(driver& drv, drv_result result, int device, const char* what) {
  if (result.ok()) return;
  throw cuda_error("streampool: cudaMallocAsync backend: " + std::string(what) + " on device " +
                       std::to_string(device) + " failed: " + drv.describe(result),
                   result.native);
}

}  // namespace

std::size_t memory_of_pool_capable_device(driver& drv, int device) {
  device_info info;
  check_pool_call(drv, drv.get_device_info(device, &info), device, "reading the device properties");
  if (!info.memory_pools_supported) {
    throw error("streampool: backend:cudaMallocAsync needs stream-ordered memory pools, but device " +
                std::to_string(device) + " (" + info.name +
                ") does not support them (cudaDevAttrMemoryPoolsSupported = 0); use backend:native instead");
  }
  return info.total_memory;
}

stream_ordered_pool::stream_ordered_pool(driver& drv, int device, async_pool_kind kind)
    : driver_(&drv), device_(device) {
  if (kind == async_pool_kind::dedicated) {
    check_pool_call(drv, drv.pool_create(device, &pool_), device, "creating a dedicated memory pool");
    dedicated_ = true;
  } else {
    check_pool_call(drv, drv.pool_get_default(device, &pool_), device, "getting the default memory pool");
    // Put back at teardown (Note [Allocator teardown]); CUDA's default 0 if it cannot be read.
    std::uint64_t threshold = 0;
    if (drv.pool_get_attr(pool_, pool_attr::release_threshold, &threshold).ok()) previous_release_threshold_ = threshold;
  }
  try {
    const std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();
    check_pool_call(drv, drv.pool_set_attr(pool_, pool_attr::release_threshold, keep_all), device,
                    "setting the pool's release threshold");
    for (const pool_attr attr : {pool_attr::reuse_follow_event_dependencies, pool_attr::reuse_allow_opportunistic,
                                 pool_attr::reuse_allow_internal_dependencies}) {
      check_pool_call(drv, drv.pool_set_attr(pool_, attr, 1), device, "enabling the pool's reuse policies");
    }
  } catch (...) {
    if (dedicated_) (void)drv.pool_destroy(pool_);
    else (void)drv.pool_set_attr(pool_, pool_attr::release_threshold, previous_release_threshold_);
    throw;
  }
}

stream_ordered_pool::~stream_ordered_pool() {
  if (dedicated_) (void)driver_->pool_destroy(pool_);
}

void stream_ordered_pool::sample_reserved(async_accounting& accounting, std::size_t outside_bytes) const noexcept {
  std::uint64_t current = 0;
  std::uint64_t high = 0;
  if (!driver_->pool_get_attr(pool_, pool_attr::reserved_mem_current, &current).ok()) return;
  if (!driver_->pool_get_attr(pool_, pool_attr::reserved_mem_high, &high).ok()) high = current;
  accounting.observe_reserved(current + outside_bytes, high + outside_bytes);
}

void stream_ordered_pool::reset_peaks() noexcept {
  // Setting a High attribute to 0 makes the driver reset it to the current value.
  (void)driver_->pool_set_attr(pool_, pool_attr::reserved_mem_high, 0);
  (void)driver_->pool_set_attr(pool_, pool_attr::used_mem_high, 0);
}

bool stream_ordered_pool::used_bytes(std::uint64_t* out) const noexcept {
  return driver_->pool_get_attr(pool_, pool_attr::used_mem_current, out).ok();
}

drv_result stream_ordered_pool::trim() noexcept { return driver_->pool_trim_to(pool_, 0); }

void stream_ordered_pool::trim_or_throw() {
  check_pool_call(*driver_, driver_->pool_trim_to(pool_, 0), device_, "trimming the memory pool");
}

void stream_ordered_pool::restore_release_threshold() noexcept {
  if (!dedicated_) (void)driver_->pool_set_attr(pool_, pool_attr::release_threshold, previous_release_threshold_);
}

}  // namespace streampool::async
