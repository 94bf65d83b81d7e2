// capture_book.cpp — see capture_book.hpp.
//
// Note [Captures in the cudaMallocAsync backend]
// Under stream capture cudaMallocAsync / cudaFreeAsync become graph memory nodes: the graph owns
// that memory, its addresses are fixed for the graph's life, and the driver keeps it apart from
// the pool. So the backend needs no private pools of its own; begin_allocate_to_pool only marks
// allocations whose stream passes a filter as "captured" and tags them with the pool id (for
// snapshots and traces), and release_pool only counts uses. PyTorch's version allows one capture
// per process because it keeps a single "capture underway" flag and one list of free streams to
// rejoin; here each device keeps a list of recordings with their filters (routing looks at the
// most recent first, like the native backend), so several captures, on one device or several,
// may run at once.
// Rejoining: PyTorch frees on one "unifying" stream and so must make the capture stream wait on
// it at endAllocateToPool. Here a free is issued on the allocation's own stream, so a dangling
// free node can only sit on a side stream that allocated during the capture; capture_scope joins
// every such stream back before it ends the capture (Note [Joining side streams] in
// src/capture/capture_scope.cpp). end_allocate_to_pool comes after the capture has ended (spec
// §3.2 order), too late to add graph edges, so the backend does not try. Frees of captured
// allocations after the capture: Note [Frees of captured allocations] in async_device_admin.cpp.
//
// Note [Deferred frees during capture]
// While any capture is underway on a device, freeing an allocation that was NOT made during a
// capture must not reach cudaFreeAsync: on a capturing stream it would become a free node of the
// graph for memory the graph does not own (illegal), and on another stream it could let the pool
// hand the memory to a captured allocation while work the graph will replay still reads it. Such a
// free is accounted as requested (allocation -1, free_requested trace) and parked; the memory stays
// "active" (active_pending_free in the snapshot). Parked frees are issued once no capture is
// underway on the device — at end_allocate_to_pool of the last capture, or at the next allocate,
// deallocate or empty_cache — and only when none of the streams involved reports an active
// capture (a user may end the routing before ending the stream capture). Frees of captured
// allocations go to cudaFreeAsync at once: they become graph free nodes. No event is queried at
// any point: the record_stream handling needs only event_record and stream_wait_event, which are
// legal under capture.
#include "async/capture_book.hpp"

#include <algorithm>
#include <string>

#include "streampool/errors.hpp"

namespace streampool::detail {
namespace {

std::string pool_text(mempool_id pool) {
  return "{" + std::to_string(pool.first) + "," + std::to_string(pool.second) + "}";
}

}  // namespace

void capture_book::begin(int device, mempool_id pool, stream_filter filter) {
  const auto same = [&](const recording& r) { return r.pool == pool; };
  if (std::any_of(recordings_.begin(), recordings_.end(), same)) {
    throw error("streampool: begin_allocate_to_pool: already recording to pool " + pool_text(pool) +
                " on device " + std::to_string(device) + "; call end_allocate_to_pool first");
  }
  recordings_.push_back({pool, std::move(filter)});
  try {
    ++use_counts_[pool];
  } catch (...) {
    recordings_.pop_back();
    throw;
  }
}

void capture_book::end(int device, mempool_id pool) {
  const auto it = std::find_if(recordings_.begin(), recordings_.end(),
                               [&](const recording& r) { return r.pool == pool; });
  if (it == recordings_.end()) {
    throw error("streampool: end_allocate_to_pool: not recording to pool " + pool_text(pool) + " on device " +
                std::to_string(device) + " (no begin_allocate_to_pool for it, or already ended)");
  }
  recordings_.erase(it);
}

void capture_book::release(int device, mempool_id pool) {
  const auto it = use_counts_.find(pool);
  if (it == use_counts_.end()) {
    throw error("streampool: release_pool: pool " + pool_text(pool) + " has no use on device " +
                std::to_string(device) + " (never passed to begin_allocate_to_pool, or already released)");
  }
  if (--it->second == 0) use_counts_.erase(it);
}

std::optional<mempool_id> capture_book::route(stream_t stream) const {
  for (auto it = recordings_.rbegin(); it != recordings_.rend(); ++it) {
    if (it->filter(stream)) return it->pool;
  }
  return std::nullopt;
}

std::size_t capture_book::use_count(mempool_id pool) const noexcept {
  const auto it = use_counts_.find(pool);
  return it == use_counts_.end() ? 0 : it->second;
}

}  // namespace streampool::detail
