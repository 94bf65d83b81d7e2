// async_device.cpp — the allocate/free paths of one device of the cudaMallocAsync backend, the
// frees deferred during a capture, empty_cache and teardown. Statistics, snapshots, fraction and
// capture entry points: async_device_admin.cpp; the OOM diagnostic: async_device_oom.cpp; the pool's
// set-up: stream_ordered_pool.cpp; private pools' blocks: private_pools.cpp.
#include "async/async_device.hpp"

#include <string>

#include "core/format.hpp"
#include "core/oom_message.hpp"
#include "streampool/errors.hpp"

namespace streampool::async {

async_device::async_device(driver& drv, int device, const allocator_config& config, pointer_map& pointers,
                           core::trace_ring& trace)
    : driver_(&drv),
      device_(device),
      pointers_(&pointers),
      trace_(trace, device),
      cap_(memory_of_pool_capable_device(drv, device), config.per_process_memory_fraction),
      captures_(device),
      stream_uses_(drv, device),
      pool_(drv, device, config.async_pool),
      private_pools_(drv, device, pointers, accounting_, trace_, pool_),
      oom_(drv, device, cap_, accounting_, pool_, private_pools_, captures_, trace_) {}

// Note [Allocator teardown]
// As with the native backend, destroying the allocator gives back all the device memory it holds,
// live allocations included (their pointers dangle then, as with native): the device is
// synchronised so that the work that may still use them is done, each live allocation of the device
// is freed on its stream, and the pool is trimmed. The default pool gets back the release threshold
// it had before set-up raised it, so the device's other users of that pool do not inherit a cache
// that never shrinks; a dedicated pool is destroyed. While a capture is underway nothing may be
// synchronised or trimmed, and the pool keeps the memory.
async_device::~async_device() {
  std::lock_guard lock(mutex_);
  if (!captures_.underway()) {
    flush_deferred_locked();
    (void)driver_->device_synchronize(device_);
    try {
      for (const auto& [address, record] : pointers_->live_on(device_)) {
        if (record.captured) continue;  // a private pool's block: given back below
        void* ptr = reinterpret_cast<void*>(address);
        if (!driver_->free_async(ptr, record.stream).ok()) (void)driver_->free_async(ptr, nullptr);
      }
    } catch (...) {
      // Host memory exhausted while listing them: the live allocations stay with the pool.
    }
    // Private pools' blocks, live or idle (Note [Private pools of the cudaMallocAsync backend]).
    captures_.for_each_pool([&](const private_pool& pool) { private_pools_.free_all(pool); });
    pool_.restore_release_threshold();
    (void)driver_->device_synchronize(device_);
    (void)pool_.trim();
  }
  // A dedicated pool is destroyed by pool_'s destructor, right after this.
}

// Note [Hot path of the cudaMallocAsync backend]
// A cache-hit alloc+free pair costs one malloc_async and one free_async (pinned by
// tests/unit/async/async_hot_path_test.cpp); everything else is host bookkeeping kept small:
//  - allocate: the device lock (core hybrid_mutex: two atomic operations uncontended); parked
//    frees are looked at only when there are some, routing only while a recording is underway;
//    the fraction cap is checked against our own accounting (no mem_get_info); malloc_async; the
//    pointer-map insert (one shard lock, a slot of a flat table: no host allocation); the
//    accounting; trace calls that are one inline test while history is off.
//  - deallocate: the pointer-map take, the device lock, free_async, the accounting. An
//    allocation a recording routed goes back to its private pool with no driver call at all
//    (Note [Private pools of the cudaMallocAsync backend]).
//  - reserved_bytes is read from the pool lazily: at stats(), reset_peak_stats(), empty_cache()
//    and OOM, never per call; its peak includes the pool's ReservedMemHigh, so a peak reached
//    between readings is not lost (Note [Statistics of the cudaMallocAsync backend]).
//  - capture needs no per-call query: allocations are routed, and frees of uncaptured memory
//    deferred, by the recordings of begin_allocate_to_pool, which the capture protocol
//    (docs/pytorch-compatibility.md §3.2) opens before the stream begins capturing. A capture status cached per stream would
//    not be safe: a stream may begin a new capture between two calls without the backend seeing
//    it.
// The device lock is held across the driver call: that keeps a free that was decided before a
// recording began ahead of the recording in the driver's order too (so it cannot land inside
// the capture), and it costs nothing on one thread. Threads allocating on one device do
// serialise on it; the driver serialises stream-ordered pool calls as well (docs/benchmarks.md).
void* async_device::allocate(std::size_t bytes, stream_t stream) {
  std::lock_guard lock(mutex_);
  if (!captures_.underway() && captures_.has_deferred()) flush_deferred_locked();
  if (captures_.underway()) {
    // Note [Private pools of the cudaMallocAsync backend]: not a graph allocation node.
    if (private_pool* pool = captures_.route(stream)) return allocate_private_locked(*pool, bytes, stream);
  }
  allocation_record record;
  record.device = device_;
  record.size = bytes;
  record.stream = stream;
  // Note [Impossible requests]: a request larger than the device's memory cannot succeed, and
  // asking the pool anyway is not free: on the H200 a cudaMallocAsync of twice the device took
  // ~11 s and, while it tried, took so much of the device that another process's
  // cudaStreamCreate failed with out of memory. So it is refused here, without a driver call.
  if (bytes > cap_.total_memory()) throw oom_locked(bytes, stream, record.pool, oom_cause::device_size);
  // See Note [Memory fraction]: checked before the driver is asked, so a capped request never
  // grows the pool. Idle blocks of private pools are held memory too.
  if (cap_.refuses(held_bytes_locked(), async_footprint(bytes)) &&
      !cap_allows_after_release_locked(async_footprint(bytes))) {
    if (void* borrowed = borrow_on_oom_locked(bytes, stream)) return borrowed;  // Note [Pool options]
    throw oom_locked(bytes, stream, record.pool, oom_cause::cap);
  }
  void* ptr = nullptr;
  const drv_result result = malloc_with_retry_locked(bytes, stream, &ptr);
  if (result.code == status::out_of_memory) {
    if (void* borrowed = borrow_on_oom_locked(bytes, stream)) return borrowed;
    throw oom_locked(bytes, stream, record.pool, oom_cause::driver);
  }
  if (!result.ok()) {
    throw cuda_error("streampool: cudaMallocAsync of " + format_size(bytes) + " on device " +
                         std::to_string(device_) + " failed: " + driver_->describe(result),
                     result.native);
  }
  const mempool_id pool = record.pool;
  try {
    pointers_->insert(ptr, std::move(record));
  } catch (...) {
    (void)driver_->free_async(ptr, stream);  // host memory exhausted: give the block back
    throw;
  }
  accounting_.on_alloc(bytes);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  trace_.record(trace_action::segment_alloc, address, async_footprint(bytes), stream, pool);
  trace_.record(trace_action::alloc, address, bytes, stream, pool);
  return ptr;
}

void* async_device::allocate_private_locked(private_pool& pool, std::size_t bytes, stream_t stream) {
  if (void* ptr = private_pools_.reuse(pool, bytes, stream)) return ptr;
  // A new block. Note [Impossible requests] and Note [Memory fraction] as for the stream-ordered
  // pool; idle private blocks are held memory too.
  if (bytes > cap_.total_memory()) throw oom_locked(bytes, stream, pool.id, oom_cause::device_size);
  const std::size_t size = private_pools::new_block_size(bytes);
  if (cap_.refuses(held_bytes_locked(), size) && !cap_allows_after_release_locked(size)) {
    throw oom_locked(bytes, stream, pool.id, oom_cause::cap);
  }
  void* ptr = private_pools_.add_block(pool, bytes, size, stream);
  if (ptr != nullptr) return ptr;
  const out_of_memory oom = oom_locked(bytes, stream, pool.id, oom_cause::driver);
  if (pool.options.provider == nullptr) throw oom;
  // Note [Pool options]: the provider had no memory, whatever the device has.
  throw out_of_memory(oom.what() + core::provider_oom_note(pool.id, *pool.options.provider), oom.requested_bytes(),
                      oom.device());
}

void* async_device::borrow_on_oom_locked(std::size_t bytes, stream_t stream) {
  // Note [Pool options] in src/core/allocator.cpp: an idle block of a use_on_oom pool on `stream`,
  // after the cap's and the driver's retries; not of a released pool or one being recorded to.
  return captures_.first_use_on_oom([&](private_pool& pool) { return private_pools_.reuse(pool, bytes, stream); });
}

out_of_memory async_device::oom_locked(std::size_t bytes, stream_t stream, mempool_id pool, oom_cause cause) {
  return oom_.report({bytes, stream, pool, cause, last_malloc_retried_, held_bytes_locked()});
}

drv_result async_device::malloc_with_retry_locked(std::size_t bytes, stream_t stream, void** out) {
  last_malloc_retried_ = false;
  // Note [Relaxed uncaptured calls] (docs/graph-capture.md): while a capture is underway, an
  // allocation on a stream outside it would break it in global mode; relaxed, it does not (and a
  // captured stream's allocation becomes a graph memory node either way). Outside captures this
  // costs one branch.
  const relaxed_thread_scope relaxed(*driver_, captures_.underway());
  drv_result result = driver_->malloc_async(pool_.handle(), bytes, stream, out);
  // No synchronisation is legal while a capture is underway (docs/pytorch-compatibility.md §3.3): go straight to the OOM.
  if (result.code != status::out_of_memory || captures_.underway()) return result;
  if (!synchronize_and_trim_locked()) return result;
  accounting_.on_retry();
  last_malloc_retried_ = true;
  return driver_->malloc_async(pool_.handle(), bytes, stream, out);
}

// Note [Cap refusals give back released pools first]
// The idle blocks of a released private pool are cache: they are given back at the next
// empty_cache, or when the driver runs out of memory (synchronize_and_trim_locked), as the native
// backend's OOM ladder releases cached memory before it fails. They also count in the bytes the
// fraction cap compares, so a request the cap refused only because of them failed although
// nothing the program holds stood in its way (a random model-based sequence found it: a block of
// a pool released during its capture and freed after it kept 32 MiB held). So a refusal of the
// cap first gives those blocks back (device synchronise, as for the driver's out of memory; never
// during a capture, when cudaFree is illegal) and asks the cap again; the retry is counted in
// num_alloc_retries.
bool async_device::cap_allows_after_release_locked(std::size_t more) noexcept {
  if (captures_.underway() || !captures_.has_freeable() || private_pools_.idle_bytes() == 0) return false;
  if (!synchronize_and_trim_locked()) return false;
  accounting_.on_retry();
  return !cap_.refuses(held_bytes_locked(), more);
}

bool async_device::synchronize_and_trim_locked() noexcept {
  if (!driver_->device_synchronize(device_).ok()) return false;
  accounting_.on_device_synchronize();
  (void)pool_.trim();
  try {
    forget_released_pools_locked();  // released private pools' idle blocks, as native's OOM ladder does
  } catch (...) {
    // Host memory exhausted: the retry goes ahead without them.
  }
  sample_reserved_locked();
  return true;
}

// Deferred frees in this backend (Note [Deferred frees during capture] in
// src/capture/capture_router.hpp):
// While any capture is underway on a device, freeing an allocation that was NOT made during a
// capture must not reach cudaFreeAsync: on a capturing stream it would become a free node of the
// graph for memory the graph does not own (illegal), and on another stream it could let the pool
// hand the memory to another allocation while work the graph will replay still reads it. Such a
// free is accounted as requested (allocation -1, free_requested trace) and parked; the memory stays
// "active" (active_pending_free in the snapshot). The router hands parked frees back once no
// capture is underway on the device (Note [Parked frees] in src/capture/capture_router.hpp); they
// are issued then — at end_allocate_to_pool of the last capture, or at the next allocate,
// deallocate or empty_cache — and only when none of the streams involved reports an active
// capture (a user may end the routing before ending the stream capture). Frees of captured
// allocations go back to their private pool at once, with no cudaFreeAsync (Note [Private pools
// of the cudaMallocAsync backend]). No event is queried at
// any point: the record_stream handling needs only event_record and stream_wait_event, which are
// legal under capture.
void async_device::free(void* ptr, allocation_record& record) {
  std::lock_guard lock(mutex_);
  const bool underway = captures_.underway();
  if (!underway && captures_.has_deferred()) flush_deferred_locked();
  if (record.captured) {
    // Back to its private pool, during the capture or after it; a live block keeps its pool known.
    if (stream_uses_.order_free(ptr, record)) accounting_.on_device_synchronize();  // throws before any change
    private_pools_.take_back(*captures_.find(record.pool), ptr, record);
    return;
  }
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (underway && !record.captured) {
    // Note [Deferred frees during capture]. Parked first: on bad_alloc nothing changed, and the
    // record is left as it was (emplace_back allocates before it moves the record in).
    const std::size_t size = record.size;
    const stream_t stream = record.stream;
    const mempool_id pool = record.pool;
    captures_.defer(ptr, std::move(record));
    accounting_.on_free_requested(size);
    trace_.record(trace_action::free_requested, address, size, stream, pool);
    return;
  }
  release_locked(ptr, record);  // throws before changing anything
  accounting_.on_free_requested(record.size);
  // Traced in order: requested, then completed (the free is the pool's from here).
  trace_.record(trace_action::free_requested, address, record.size, record.stream, record.pool);
  trace_.record(trace_action::free_completed, address, record.size, record.stream, record.pool);
  trace_.record(trace_action::segment_free, address, async_footprint(record.size), record.stream, record.pool);
}

// The free is ordered after the record_stream streams' work by a stream wait (Note [record_stream
// by stream wait] in record_stream_order.cpp), then issued on the allocation stream.
void async_device::release_locked(void* ptr, const allocation_record& record) {
  const bool host_synchronised = stream_uses_.order_free(ptr, record);
  const drv_result result = [&] {
    // Note [Relaxed uncaptured calls] (docs/graph-capture.md): while a capture is underway, a free
    // on a stream outside it would break it in global mode; relaxed, it does not.
    const relaxed_thread_scope relaxed(*driver_, captures_.underway());
    return driver_->free_async(ptr, record.stream);
  }();
  if (!result.ok()) {
    throw cuda_error("streampool: cudaFreeAsync of " + core::format_pointer(ptr) + " on device " +
                         std::to_string(device_) + " failed: " + driver_->describe(result),
                     result.native);
  }
  if (host_synchronised) accounting_.on_device_synchronize();
  accounting_.on_free_completed(record.size);
}

void async_device::flush_deferred_locked() noexcept {
  // Note [Relaxed uncaptured calls]: no recording is left, but a strict capture may still be open
  // (routing may end before the stream capture does); a free_async outside it must not break it.
  // Parked frees are rare, so the two mode exchanges cost nothing that matters.
  const relaxed_thread_scope relaxed(*driver_, true);
  std::vector<deferred_free> deferred = captures_.take_deferred();  // none while a capture is underway
  const auto capturing = [this](stream_t stream) {
    capture_info info;
    return driver_->stream_capture_info(stream, &info).ok() && info.status != capture_status::none;
  };
  std::size_t kept = 0;
  for (std::size_t i = 0; i < deferred.size(); ++i) {
    deferred_free& item = deferred[i];
    bool ready = !capturing(item.record.stream);
    for (const stream_t use : item.record.stream_uses) ready = ready && !capturing(use);
    if (ready) {
      try {
        release_locked(item.ptr, item.record);
        const auto address = reinterpret_cast<std::uintptr_t>(item.ptr);
        trace_.record(trace_action::free_completed, address, item.record.size, item.record.stream, item.record.pool);
        trace_.record(trace_action::segment_free, address, async_footprint(item.record.size), item.record.stream,
                      item.record.pool);
        continue;
      } catch (...) {
        // Kept for a later attempt: a parked free must not make an unrelated call fail.
      }
    }
    if (kept != i) deferred[kept] = std::move(item);
    ++kept;
  }
  deferred.resize(kept);
  // Back to the router; every free is parked under the device mutex, held here, so nothing was
  // parked meanwhile and this allocates nothing.
  captures_.keep_deferred(std::move(deferred));
}

void async_device::empty_cache() {
  std::lock_guard lock(mutex_);
  if (captures_.underway()) return;  // synchronising would be illegal; the pool keeps its memory
  if (captures_.has_deferred()) flush_deferred_locked();
  sample_reserved_locked();
  const drv_result result = driver_->device_synchronize(device_);
  if (!result.ok()) {
    throw cuda_error("streampool: empty_cache: synchronising device " + std::to_string(device_) +
                         " failed: " + driver_->describe(result),
                     result.native);
  }
  accounting_.on_device_synchronize();
  pool_.trim_or_throw();
  // Memory of destroyed graphs' allocations stays cached by the device for later graphs until
  // trimmed (Note [Graph lifetime] in src/graph/captured_graph.cpp); not_supported: no graphs.
  (void)driver_->graph_mem_trim(device_);
  sample_reserved_locked();
  forget_released_pools_locked();
}

}  // namespace streampool::async
