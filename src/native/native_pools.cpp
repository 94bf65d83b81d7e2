// native_pools.cpp — native_allocator::pool_seam: the private pools of one device of the native
// backend (Note [Pool seam] in src/core/device_pools.cpp) over its device_state, and allocations at
// an address (Note [Allocations at an address]).
#include <mutex>
#include <string>

#include "core/format.hpp"
#include "native/expandable.hpp"
#include "native/native_allocator.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

native_allocator::pool_seam::pool_seam(device_state& state, const segment_map& segments) noexcept
    : device_pools(state.index()), state_(&state), segments_(&segments) {}

void native_allocator::pool_seam::do_begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  state_->begin_allocate_to_pool(pool, std::move(filter));
}

void native_allocator::pool_seam::do_end_allocate_to_pool(mempool_id pool) { state_->end_allocate_to_pool(pool); }

void native_allocator::pool_seam::do_release_pool(mempool_id pool) { state_->release_pool(pool); }

void native_allocator::pool_seam::do_set_options(mempool_id pool, const pool_options& options) {
  if (options.page_bytes > max_page_bytes) {
    throw error("streampool: set_pool_options: page_bytes " + std::to_string(options.page_bytes) +
                " is more than 16 TiB; use 0 (the default page) or a size up to 16 TiB");
  }
  state_->set_pool_options(pool, options);
}

pool_options native_allocator::pool_seam::do_options(mempool_id pool) const { return state_->get_pool_options(pool); }

// Note [Allocations at an address]
// PyTorch's CUDA graph trees checkpoint a private pool (its allocated blocks) and restore it later,
// when a new graph branches off a replayed one: allocations made since are freed and the
// checkpoint's allocations that were freed since are made again, at the same addresses, which the
// graphs have baked in. allocate_at carves such a range out of the free block of the pool that
// holds it (split before and after, as the blocks were split when the checkpoint was taken) and
// hands it out like any allocation (statistics, trace, live map). The range must be free memory
// of that pool on that device; anything else is refused with nothing changed.
void* native_allocator::pool_seam::do_allocate_at(void* ptr, std::size_t bytes, mempool_id pool) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const int device = state_->index();
  std::lock_guard device_lock(state_->mutex());
  stream_arena* a = segments_->find(address);
  if (a == nullptr || a->pool() == nullptr || a->pool_id() != pool || a->device().index != device) {
    throw error("streampool: allocate_at(" + core::format_pointer(address) + "): not memory of private pool {" +
                std::to_string(pool.first) + ", " + std::to_string(pool.second) + "} on device " +
                std::to_string(device));
  }
  state_->check_awake_locked(pool, bytes);  // Note [Refused while asleep]
  std::lock_guard arena_lock(a->mutex());
  if (a->allocate_at(address, bytes) == nullptr) {
    throw error("streampool: allocate_at(" + core::format_pointer(address) + ", " + std::to_string(bytes) +
                " bytes): that range of private pool {" + std::to_string(pool.first) + ", " +
                std::to_string(pool.second) + "} is not free (allocated, waiting for its events, or not mapped)");
  }
  return ptr;
}

void native_allocator::pool_seam::do_sleep(mempool_id pool, const sleep_options& options) {
  state_->sleep_pool(pool, options);
}

void native_allocator::pool_seam::do_wake(mempool_id pool) { state_->wake_pool(pool); }

pool_sleep_state native_allocator::pool_seam::do_sleep_state(mempool_id pool) const {
  return state_->sleep_state(pool);
}

}  // namespace streampool::native
