// sim_pool_calls.cpp — the simulated pools' driver calls (pool_calls): handles, attributes,
// access, trimming, and stream-ordered allocation with the capture rules of graph-owned memory
// (Note [Sim graph memory]). The memory model is pool_space's, in sim_pool.cpp.
#include "driver/sim/sim_pool_calls.hpp"

namespace streampool::sim {

drv_result pool_calls::pool_get_default(int device, mempool_t* out) {
  *out = nullptr;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (!device_.options_.memory_pools_supported) {
    return fail(status::not_supported);
  }
  *out = device_.pools_.default_pool(device);
  return drv_result{};
}

drv_result pool_calls::pool_create(int device, mempool_t* out) {
  *out = nullptr;
  if (const drv_result bad = device_.check_device(device); !bad.ok()) {
    return bad;
  }
  if (!device_.options_.memory_pools_supported) {
    return fail(status::not_supported);
  }
  *out = device_.pools_.create(device);
  return drv_result{};
}

// Note [Destroying a pool with live allocations]
// As cudaMemPoolDestroy does, destroying a pool that still has allocations succeeds: the handle
// is dead at once (every later call with it is invalid_value), idle chunks are released now and
// the rest as their last allocation is freed (free_async of them keeps working). The default
// pool cannot be destroyed (invalid_value).
drv_result pool_calls::pool_destroy(mempool_t pool) {
  pool_rec* rec = device_.pools_.find(pool);
  if (rec == nullptr || rec->is_default) {
    return fail(status::invalid_value);
  }
  device_.pools_.destroy(*rec, device_.streams_);
  return drv_result{};
}

drv_result pool_calls::pool_set_attr(mempool_t pool, pool_attr attr, std::uint64_t value) {
  pool_rec* rec = device_.pools_.find(pool);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  switch (attr) {
    case pool_attr::release_threshold: rec->release_threshold = value; break;
    case pool_attr::reuse_follow_event_dependencies: rec->follow_event_dependencies = value != 0; break;
    case pool_attr::reuse_allow_opportunistic: rec->allow_opportunistic = value != 0; break;
    case pool_attr::reuse_allow_internal_dependencies: rec->allow_internal_dependencies = value != 0; break;
    case pool_attr::reserved_mem_high:
      if (value != 0) {
        return fail(status::invalid_value);  // a high-water mark can only be reset (to current)
      }
      rec->reserved_high = rec->reserved;
      break;
    case pool_attr::used_mem_high:
      if (value != 0) {
        return fail(status::invalid_value);
      }
      rec->used_high = rec->used;
      break;
    case pool_attr::reserved_mem_current:
    case pool_attr::used_mem_current:
    default: return fail(status::invalid_value);
  }
  return drv_result{};
}

drv_result pool_calls::pool_get_attr(mempool_t pool, pool_attr attr, std::uint64_t* value) {
  const pool_rec* rec = device_.pools_.find(pool);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  switch (attr) {
    case pool_attr::release_threshold: *value = rec->release_threshold; break;
    case pool_attr::reserved_mem_current: *value = rec->reserved; break;
    case pool_attr::reserved_mem_high: *value = rec->reserved_high; break;
    case pool_attr::used_mem_current: *value = rec->used; break;
    case pool_attr::used_mem_high: *value = rec->used_high; break;
    case pool_attr::reuse_follow_event_dependencies: *value = rec->follow_event_dependencies ? 1 : 0; break;
    case pool_attr::reuse_allow_opportunistic: *value = rec->allow_opportunistic ? 1 : 0; break;
    case pool_attr::reuse_allow_internal_dependencies: *value = rec->allow_internal_dependencies ? 1 : 0; break;
    default: return fail(status::invalid_value);
  }
  return drv_result{};
}

drv_result pool_calls::pool_set_access(mempool_t pool, int peer_device, bool enable) {
  pool_rec* rec = device_.pools_.find(pool);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  if (const drv_result bad = device_.check_device(peer_device); !bad.ok()) {
    return bad;
  }
  const std::uint64_t bit = std::uint64_t{1} << peer_device;
  if (peer_device == rec->device) {  // the owner keeps access; CUDA answers invalid_device
    return enable ? drv_result{} : fail(status::invalid_device);
  }
  rec->peers = enable ? (rec->peers | bit) : (rec->peers & ~bit);
  return drv_result{};
}

drv_result pool_calls::pool_trim_to(mempool_t pool, std::size_t keep_bytes) {
  if (device_.captures_.active() > 0) {
    return device_.captures_.refuse();
  }
  pool_rec* rec = device_.pools_.find(pool);
  if (rec == nullptr) {
    return fail(status::invalid_value);
  }
  device_.pools_.trim(*rec, keep_bytes, false, device_.streams_);
  return drv_result{};
}

drv_result pool_calls::malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out) {
  *out = nullptr;
  pool_rec* rec = device_.pools_.find(pool);
  const std::uint32_t stream_index = device_.streams_.find_stream(stream);
  if (rec != nullptr && stream_index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (rec == nullptr || stream_index == no_stream) {
    return fail(status::invalid_value);
  }
  if (device_.captures_.refuses_uncaptured(stream_index)) {  // Note [Relaxed uncaptured calls]
    return device_.captures_.refuse();
  }
  if (bytes == 0) {
    return drv_result{};
  }
  const drv_result result =
      device_.pools_.allocate(*rec, bytes, stream_index, device_.streams_, device_.available(rec->device), out);
  const stream_rec& on = device_.streams_[stream_index];
  if (result.ok() && on.capture == capture_status::active && on.begun) {
    device_.pools_.find_live(*out)->graph_capture = on.capture_id;  // Note [Sim graph memory]
  }
  return result;
}

// Note [Sim graph memory]
// Under a capture begun with stream_begin_capture, cudaMallocAsync on a capturing stream is a
// graph allocation node: the memory belongs to the graph, and exists only once a launch of the
// graph has allocated it. CUDA refuses (cudaErrorInvalidValue) a cudaFreeAsync of it from outside
// the capture before any launch of the graph: seen on the H200 when PyTorch's cudagraph trees
// freed capture-time memory before the first replay. The sim serves such an allocation from the
// pool as usual (it keeps no graph memory) but tags the block with its capture and refuses, the
// same way, a free_async from a stream that is not in that capture while no executable of its
// graph has been launched (invalid_value; the capture itself is not affected). A free inside the
// capture (a graph free node) and a free after a launch succeed, as on CUDA.
drv_result pool_calls::free_async(void* ptr, stream_t stream) {
  const std::uint32_t stream_index = device_.streams_.find_stream(stream);
  if (stream_index == no_stream) {
    return device_.streams_.failure(stream);
  }
  if (device_.captures_.refuses_uncaptured(stream_index)) {  // Note [Relaxed uncaptured calls]
    return device_.captures_.refuse();
  }
  if (ptr == nullptr) {
    return drv_result{};
  }
  block_rec* block = device_.pools_.find_live(ptr);
  if (block == nullptr) {
    return fail(status::invalid_value);
  }
  if (block->graph_capture != 0) {  // Note [Sim graph memory]
    const stream_rec& freeing = device_.streams_[stream_index];
    const bool in_capture = freeing.capture == capture_status::active && freeing.capture_id == block->graph_capture;
    if (!in_capture && !device_.graphs_.launched(block->graph_capture)) {
      return fail(status::invalid_value);
    }
  }
  device_.pools_.release(block, stream_index, device_.streams_.submit(stream_index), device_.streams_);
  return drv_result{};
}

}  // namespace streampool::sim
