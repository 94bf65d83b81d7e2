// async_pools.cpp — async_allocator::pool_seam: the private pools of one device of the
// cudaMallocAsync backend (Note [Pool seam] in src/core/device_pools.cpp). Routing sets the device
// up on first use; options need a pool made already; allocations at an address are the native
// backend's alone.
#include <string>

#include "async/async_allocator.hpp"
#include "capture/capture_router.hpp"
#include "streampool/errors.hpp"

namespace streampool::async {

void async_allocator::pool_seam::do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  owner_->device(device()).begin_allocate_to_pool(pool, std::move(filter));
}

void async_allocator::pool_seam::do_end_allocate_to_pool(mempool_id pool) {
  owner_->device(device()).end_allocate_to_pool(pool);
}

void async_allocator::pool_seam::do_release_pool(mempool_id pool) { owner_->device(device()).release_pool(pool); }

void async_allocator::pool_seam::do_set_options(mempool_id pool, const pool_options& options) {
  if (options.sleepable) throw_cannot_sleep("set_pool_options(sleepable)");
  if (options.page_bytes != 0) {
    throw error("streampool: set_pool_options(page_bytes " + std::to_string(options.page_bytes) +
                "): the cudaMallocAsync backend's pools have no pages of their own (a CUDA memory pool maps its "
                "memory itself); leave page_bytes 0, or use backend:native");
  }
  async_device* d = owner_->find_device(device());
  if (d == nullptr) capture::throw_options_unknown(device(), pool);  // no pool was made on it
  d->set_pool_options(pool, options);
}

pool_options async_allocator::pool_seam::do_options(mempool_id pool) const {
  const async_device* d = owner_->find_device(device());
  if (d == nullptr) capture::throw_options_unknown(device(), pool);  // no pool was made on it
  return d->get_pool_options(pool);
}

void* async_allocator::pool_seam::do_allocate_at(void* /*ptr*/, std::size_t /*bytes*/, mempool_id /*pool*/) {
  throw error("streampool: allocate_at is not supported by this allocator (cudaMallocAsync): only the native backend "
              "places an allocation at a given address");
}

// Note [cudaMallocAsync cannot sleep]
// A CUDA memory pool owns its physical memory: the runtime maps and unmaps it, and it offers no
// call that gives back the pages under live allocations while keeping their addresses
// (cudaMemPoolTrimTo releases only memory no allocation uses, and the pool's mappings are not
// exposed as cuMem handles the caller could unmap). So this backend refuses sleep, with the way
// out: the native backend's VMM segments (docs/sleep-wake.md). sleep_state answers "awake".
void async_allocator::pool_seam::throw_cannot_sleep(const char* what) {
  throw error(std::string("streampool: ") + what + " is not supported by the cudaMallocAsync backend: a CUDA memory "
              "pool cannot give back the physical memory under live allocations at the same addresses. Use "
              "backend:native (with expandable_segments:True for the default pool, or a sleepable private pool)");
}

void async_allocator::pool_seam::do_sleep(mempool_id /*pool*/, const sleep_options& /*options*/) {
  throw_cannot_sleep("sleep");
}

void async_allocator::pool_seam::do_wake(mempool_id /*pool*/) { throw_cannot_sleep("wake"); }

pool_sleep_state async_allocator::pool_seam::do_sleep_state(mempool_id /*pool*/) const { return {}; }

}  // namespace streampool::async
