// async_device_admin.cpp — the non-allocating entry points of one device of the cudaMallocAsync
// backend: statistics (Note [Statistics of the cudaMallocAsync backend]), snapshot segments, the
// memory-fraction cap and the capture calls (Note [Captures in the cudaMallocAsync backend]).
#include <cmath>
#include <limits>

#include "async/async_device.hpp"
#include "streampool/allocator.hpp"

namespace streampool::async {
namespace {

segment_info one_block_segment(int device, std::uintptr_t address, const allocation_record& record,
                               block_state state) {
  segment_info segment;
  segment.device = device;
  segment.address = address;
  segment.total_size = async_footprint(record.size);
  segment.allocated_size = state == block_state::active_allocated ? segment.total_size : 0;
  segment.active_size = segment.total_size;
  segment.requested_size = record.size;
  segment.stream = record.stream;
  segment.is_large = record.size > async_small_limit;
  segment.pool = record.pool;
  segment.is_expandable = false;
  segment.blocks.push_back(block_info{address, segment.total_size, record.size, state});
  return segment;
}

}  // namespace

void async_device::sample_reserved_locked() noexcept {
  std::uint64_t current = 0;
  std::uint64_t high = 0;
  if (!driver_->pool_get_attr(pool_, pool_attr::reserved_mem_current, &current).ok()) return;
  if (!driver_->pool_get_attr(pool_, pool_attr::reserved_mem_high, &high).ok()) high = current;
  // Private pools' blocks are reserved too (their peak is folded in as they grow: allocate_private_locked).
  accounting_.observe_reserved(current + private_bytes_, high + private_bytes_);
}

memory_stats async_device::stats() {
  std::lock_guard lock(mutex_);
  sample_reserved_locked();
  return accounting_.stats();
}

void async_device::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  sample_reserved_locked();
  // Setting a High attribute to 0 makes the driver reset it to the current value.
  (void)driver_->pool_set_attr(pool_, pool_attr::reserved_mem_high, 0);
  (void)driver_->pool_set_attr(pool_, pool_attr::used_mem_high, 0);
  accounting_.reset_peak();
}

void async_device::reset_accumulated_stats() {
  std::lock_guard lock(mutex_);
  accounting_.reset_accumulated();
}

void async_device::collect_segments(std::vector<segment_info>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [address, record] : pointers_->live_on(device_)) {
    out.push_back(one_block_segment(device_, address, record, block_state::active_allocated));
    if (record.captured) {
      // A private block: its segment is the whole block; the part beyond the request's footprint
      // (a reused larger block, or the rest of a 2 MiB page) is an inactive block, so allocated
      // and active bytes agree with the statistics.
      segment_info& segment = out.back();
      const std::size_t size = private_block_size(record.pool, address);
      if (size > segment.total_size) {
        segment.blocks.push_back(
            block_info{address + segment.total_size, size - segment.total_size, 0, block_state::inactive, record.stream});
        segment.total_size = size;
      }
    }
  }
  // Idle blocks of private pools: segments of the pool with one inactive block.
  captures_.for_each_pool([&](const capture_router::pool_type& pool) {
    for (const auto& [address, block] : pool.memory.blocks) {
      if (!block.idle) continue;
      segment_info segment;
      segment.device = device_;
      segment.address = address;
      segment.total_size = block.size;
      segment.stream = block.stream;
      segment.is_large = block.size > async_small_limit;
      segment.pool = pool.id;
      segment.blocks.push_back(block_info{address, block.size, 0, block_state::inactive, block.stream});
      out.push_back(std::move(segment));
    }
  });
  captures_.for_each_deferred([&](const deferred_free& item) {
    out.push_back(one_block_segment(device_, reinterpret_cast<std::uintptr_t>(item.ptr), item.record,
                                    block_state::active_pending_free));
  });
}

std::size_t async_device::active_bytes() const {
  std::lock_guard lock(mutex_);
  return accounting_.held_bytes();
}

// Note [Memory fraction]
// As in PyTorch's backends, the fraction is a cap enforced by the allocator, not a pool property:
// limit = fraction x the device's total memory, compared with the bytes this device's allocations
// hold (footprints of live allocations and deferred frees, plus idle private-pool blocks) before
// malloc_async or a private pool's cudaMalloc is called. 1.0
// means no cap (as in PyTorch before set_memory_fraction): the driver decides. The config value
// applies from the device's first use; set_memory_fraction changes it at any time (existing
// allocations stay).
std::size_t async_device::limit_locked() const noexcept {
  if (fraction_ >= 1.0) return std::numeric_limits<std::size_t>::max();  // no cap: the driver decides
  const long double limit = static_cast<long double>(fraction_) * static_cast<long double>(total_memory_);
  if (limit >= static_cast<long double>(std::numeric_limits<std::size_t>::max())) {
    return std::numeric_limits<std::size_t>::max();
  }
  return static_cast<std::size_t>(std::floor(limit));
}

void async_device::set_memory_fraction(double fraction) {
  std::lock_guard lock(mutex_);
  fraction_ = fraction;
}

double async_device::memory_fraction() const {
  std::lock_guard lock(mutex_);
  return fraction_;
}

// Note [Captures in the cudaMallocAsync backend]
// The bookkeeping is the capture router's (Note [Capture router] in
// src/capture/capture_router.hpp); this is what it means here. An allocation whose stream passes
// the filter of a recording goes to that recording's private pool, whose memory is ordinary
// device memory the graph merely uses, as with the native backend (Note [Private pools of the
// cudaMallocAsync backend] in async_private_pool.cpp); it is never a graph allocation node, so it
// may be freed at any time, inside the capture or outside it, before or after replays. PyTorch's
// version allows one capture per process because it keeps a single "capture underway" flag and
// one list of free streams to rejoin; here each device keeps a list of recordings with their
// filters (routing looks at the most recent first, like the native backend), so several
// captures, on one device or several, may run at once. A free of a private block makes no driver
// call (unless it has record_stream streams to wait for), so no free node is left on a side
// stream; capture_scope still joins every side stream that allocated back before it ends the
// capture (Note [Joining side streams] in src/capture/capture_scope.cpp).
void async_device::begin_allocate_to_pool(mempool_id pool, stream_filter filter) {
  std::lock_guard lock(mutex_);
  (void)captures_.begin(pool, std::move(filter));
}

void async_device::end_allocate_to_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  captures_.end(pool);
  if (!captures_.underway() && captures_.has_deferred()) flush_deferred_locked();
}

void async_device::release_pool(mempool_id pool) {
  std::lock_guard lock(mutex_);
  captures_.release(pool);  // forgotten at empty_cache once no allocation of it is live
}

void async_device::forget_released_pools_locked() {
  if (!captures_.has_freeable()) return;
  captures_.forget_released([&](capture_router::pool_type& pool) {
    release_idle_blocks_locked(pool);
    return pool.memory.blocks.empty();  // a block still live keeps the pool until it is freed
  });
}

}  // namespace streampool::async
