// async_device_admin.cpp — the non-allocating entry points of one device of the cudaMallocAsync
// backend: statistics (Note [Statistics of the cudaMallocAsync backend]), snapshot segments, the
// memory-fraction cap (memory_cap) and the capture calls (Note [Captures in the cudaMallocAsync
// backend]).
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

memory_stats async_device::stats() {
  std::lock_guard lock(mutex_);
  sample_reserved_locked();
  return accounting_.stats();
}

void async_device::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  sample_reserved_locked();
  pool_.reset_peaks();
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
    // A private block: its segment is the whole block.
    if (record.captured) private_pools::extend_to_block(out.back(), captures_.find(record.pool));
  }
  // Idle blocks of private pools: segments of the pool with one inactive block.
  captures_.for_each_pool([&](const private_pool& pool) { private_pools_.append_idle_segments(pool, out); });
  captures_.for_each_deferred([&](const deferred_free& item) {
    out.push_back(one_block_segment(device_, reinterpret_cast<std::uintptr_t>(item.ptr), item.record,
                                    block_state::active_pending_free));
  });
}

std::size_t async_device::active_bytes() const {
  std::lock_guard lock(mutex_);
  return accounting_.held_bytes();
}

void async_device::set_memory_fraction(double fraction) {
  std::lock_guard lock(mutex_);
  cap_.set_fraction(fraction);
}

double async_device::memory_fraction() const {
  std::lock_guard lock(mutex_);
  return cap_.fraction();
}

// Note [Captures in the cudaMallocAsync backend]
// The bookkeeping is the capture router's (Note [Capture router] in
// src/capture/capture_router.hpp); this is what it means here. An allocation whose stream passes
// the filter of a recording goes to that recording's private pool, whose memory is ordinary
// device memory the graph merely uses, as with the native backend (Note [Private pools of the
// cudaMallocAsync backend] in private_pools.cpp); it is never a graph allocation node, so it
// may be freed at any time, inside the capture or outside it, before or after replays. PyTorch's
// version allows one capture per process because it keeps a single "capture underway" flag and
// one list of free streams to rejoin; here each device keeps a list of recordings with their
// filters (routing looks at the most recent first, like the native backend), so several
// captures, on one device or several, may run at once. A free of a private block makes no driver
// call (unless it has record_stream streams to wait for), so no free node is left on a side
// stream; capture_scope still joins every side stream that allocated back before it ends the
// capture (Note [Joining side streams] in src/graph/capture_scope.cpp).
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

void async_device::set_pool_options(mempool_id pool, const pool_options& options) {
  std::lock_guard lock(mutex_);
  captures_.set_options(pool, options);  // no_split: private blocks are never split anyway
}

pool_options async_device::get_pool_options(mempool_id pool) const {
  std::lock_guard lock(mutex_);
  return captures_.options(pool);
}

void async_device::forget_released_pools_locked() {
  if (!captures_.has_freeable()) return;
  captures_.forget_released([&](private_pool& pool) { return private_pools_.release_idle(pool); });
}

}  // namespace streampool::async
