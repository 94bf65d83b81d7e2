// async_device_admin.cpp — the non-allocating entry points of one device of the cudaMallocAsync
// backend: statistics (Note [Statistics of the cudaMallocAsync backend]), snapshot segments, the
// memory-fraction cap, the capture calls (Note [Captures in the cudaMallocAsync backend]) and the
// helpers for frees of captured allocations.
#include <cmath>
#include <limits>
#include <set>

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
  accounting_.observe_reserved(current, high);
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
  }
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
// hold (footprints of live allocations and deferred frees) before malloc_async is called. 1.0
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

// Note [Frees of captured allocations]
// An allocation made under capture is a graph allocation node: the graph owns its memory. Freed
// while its stream still captures, the free becomes a graph free node (the normal case: a
// framework frees its activations inside the captured step). Freed after the capture, it is an
// "uncaptured free of a captured allocation" (PyTorch's warning): cudaFreeAsync outside the graph
// is legal once a launch of the graph has allocated it, and then the graph can be relaunched only
// if it was instantiated with auto_free_on_launch — easy to get wrong, so it is warned about (the
// text is fixed, so the default handler prints it once) and then freed like any allocation. If
// the capture was invalidated (its stream reports the invalidated status: the graph will never
// exist, nor will the memory) the record is dropped without a driver call, which would fail.
capture_status async_device::capture_state(stream_t stream) const noexcept {
  capture_info info;
  return driver_->stream_capture_info(stream, &info).ok() ? info.status : capture_status::active;
}

void async_device::warn_uncaptured_free() noexcept {
  try {
    warn("streampool: uncaptured free of a captured allocation (cudaMallocAsync backend): the memory belongs to a "
         "CUDA graph; freeing it outside the graph is legal only after a launch of the graph, and the graph can "
         "then be relaunched only if instantiated with auto_free_on_launch (docs/graph-capture.md)");
  } catch (...) {
    // A handler that throws does not stop the free.
  }
}

void async_device::drop_captured_locked(void* ptr, const allocation_record& record) noexcept {
  accounting_.on_free_requested(record.size);
  accounting_.on_free_completed(record.size);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  trace(trace_action::free_requested, address, record.size, record.stream, record.pool);
  trace(trace_action::free_completed, address, record.size, record.stream, record.pool);
  trace(trace_action::segment_free, address, async_footprint(record.size), record.stream, record.pool);
}

// Note [Captures in the cudaMallocAsync backend]
// The bookkeeping is the capture router's (Note [Capture router] in
// src/capture/capture_router.hpp); this is what it means here. Under stream capture
// cudaMallocAsync / cudaFreeAsync become graph memory nodes: the graph owns that memory, its
// addresses are fixed for the graph's life, and the driver keeps it apart from the pool. So the
// backend's private pools hold no memory of their own; begin_allocate_to_pool only marks
// allocations whose stream passes a filter as "captured" and tags them with the pool id (for
// snapshots and traces), and release_pool only counts uses (a released pool is forgotten at
// empty_cache once none of its allocations is live: Note [Released pools]). PyTorch's version
// allows one capture per process because it keeps a single "capture underway" flag and one list
// of free streams to rejoin; here each device keeps a list of recordings with their filters
// (routing looks at the most recent first, like the native backend), so several captures, on one
// device or several, may run at once.
// Rejoining: PyTorch frees on one "unifying" stream and so must make the capture stream wait on
// it at endAllocateToPool. Here a free is issued on the allocation's own stream, so a dangling
// free node can only sit on a side stream that allocated during the capture; capture_scope joins
// every such stream back before it ends the capture (Note [Joining side streams] in
// src/capture/capture_scope.cpp). end_allocate_to_pool comes after the capture has ended (spec
// §3.2 order), too late to add graph edges, so the backend does not try. Frees of captured
// allocations after the capture: Note [Frees of captured allocations] above.
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
  std::set<mempool_id> in_use;
  for (const auto& [address, record] : pointers_->live_on(device_)) {
    if (record.captured) in_use.insert(record.pool);
  }
  captures_.forget_released([&](const capture_router::pool_type& pool) { return in_use.count(pool.id) == 0; });
}

}  // namespace streampool::async
