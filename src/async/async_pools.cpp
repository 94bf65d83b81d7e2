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

}  // namespace streampool::async
