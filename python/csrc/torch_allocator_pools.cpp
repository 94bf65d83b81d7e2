// torch_allocator_pools.cpp — private pools for CUDA graphs and torch.cuda.MemPool: routing
// (begin/end allocate-to-pool with PyTorch's stream filters), use counts, the live-allocation check
// and the checkpoints of cudagraph trees (torch.compile mode="reduce-overhead").
#include "torch_allocator.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace streampool::torch_ext {

namespace {

/// Note [Checkpoint of a pool]: the allocations live in a private pool when a cudagraph-trees
/// recording ended. Restoring it later (setCheckpointPoolState) frees what was allocated since,
/// makes the checkpoint's allocations that were freed since again at their addresses
/// (allocator::allocate_at, Note [Allocations at an address]; native backend), and hands back all
/// the checkpoint's allocations, as PyTorch's allocator does. A restore that cannot place one of
/// them (its range is no longer free memory of the pool, or the backend is cudaMallocAsync) fails
/// with an error saying so.
struct pool_checkpoint final : c10a::AllocatorState {
  c10::DeviceIndex device = 0;
  c10::MempoolId_t pool{0, 0};
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;  ///< address, size; sorted
};

std::string pool_text(c10::MempoolId_t id) {
  return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")";
}

}  // namespace

void torch_allocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                          std::function<bool(cudaStream_t)> filter) {
  try {
    impl().begin_allocate_to_pool(
        to_pool(mempool_id), [f = std::move(filter)](stream_t s) { return f(static_cast<cudaStream_t>(s)); },
        device);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: beginAllocateToPool(device ", static_cast<int>(device), ", pool ",
                pool_text(mempool_id), ") failed: ", e.what());
  }
  std::lock_guard<std::mutex> lock(pools_mutex_);
  ++pool_uses_[{device, to_pool(mempool_id)}];
}

void torch_allocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  try {
    impl().end_allocate_to_pool(to_pool(mempool_id), device);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: endAllocateToPool(device ", static_cast<int>(device), ", pool ",
                pool_text(mempool_id), ") failed: ", e.what());
  }
}

void torch_allocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  // Called from destructors (CUDAGraph::reset, ~MemPool), where an exception would terminate the
  // process: a failure is reported as a warning.
  try {
    impl().release_pool(to_pool(mempool_id), device);
  } catch (const std::exception& e) {
    TORCH_WARN("streampool: releasePool(device ", static_cast<int>(device), ", pool ", pool_text(mempool_id),
               ") failed: ", e.what());
    return;
  }
  std::lock_guard<std::mutex> lock(pools_mutex_);
  auto it = pool_uses_.find({device, to_pool(mempool_id)});
  if (it != pool_uses_.end() && --it->second <= 0) pool_uses_.erase(it);
}

int torch_allocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  std::lock_guard<std::mutex> lock(pools_mutex_);
  auto it = pool_uses_.find({device, to_pool(mempool_id)});
  return it == pool_uses_.end() ? 0 : it->second;
}

void torch_allocator::change_pool_options(c10::DeviceIndex device, c10::MempoolId_t mempool_id, const char* what,
                                          const std::function<void(pool_options&)>& change) {
  // One read-modify-write at a time, so that two setters of different options lose neither.
  std::lock_guard<std::mutex> lock(options_mutex_);
  try {
    pool_options options = impl().get_pool_options(to_pool(mempool_id), device);
    change(options);
    impl().set_pool_options(to_pool(mempool_id), options, device);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "streampool: ", what, "(device ", static_cast<int>(device), ", pool ", pool_text(mempool_id),
                ") failed: ", e.what());
  }
}

void torch_allocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                         std::shared_ptr<c10a::CUDAAllocator> allocator) {
  bool created = false;
  {
    std::lock_guard<std::mutex> lock(pools_mutex_);
    created = pool_uses_.count({device, to_pool(mempool_id)}) == 0;
  }
  // A begin whose filter matches no stream, ended at once: the pool exists (or gains a use) and
  // nothing is routed to it until torch.cuda.use_mem_pool begins routing.
  beginAllocateToPool(device, mempool_id, [](cudaStream_t) { return false; });
  endAllocateToPool(device, mempool_id);
  if (allocator == nullptr || allocator.get() == this || !created) return;
  // Note [Pool options]: a MemPool with an allocator of its own (a CUDAPluggableAllocator, ...)
  // gets its segments from that allocator and gives them back to it; the pool keeps it alive.
  try {
    auto provider = std::make_shared<segment_provider>();
    provider->name = allocator->name();
    provider->allocate = [allocator](std::size_t bytes, int dev, stream_t stream) -> void* {
      const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(dev));
      try {
        return allocator->raw_alloc_with_stream(bytes, static_cast<cudaStream_t>(stream));
      } catch (const c10::OutOfMemoryError&) {
        return nullptr;  // streampool's OOM ladder goes on, and reports
      }
    };
    provider->deallocate = [allocator](void* ptr, std::size_t /*bytes*/, int dev, stream_t /*stream*/) {
      const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(dev));
      allocator->raw_delete(ptr);
    };
    change_pool_options(device, mempool_id, "torch.cuda.MemPool with an allocator of its own",
                        [&provider](pool_options& options) { options.provider = std::move(provider); });
  } catch (...) {
    releasePool(device, mempool_id);  // the MemPool is not made: give back the use taken above
    throw;
  }
}

void torch_allocator::setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) {
  // Note [Pool options] (src/core/allocator.cpp). ~MemPool turns it off before releasing the pool;
  // turning it off for a pool streampool no longer knows has nothing to do.
  if (!use_on_oom) {
    std::lock_guard<std::mutex> lock(pools_mutex_);
    if (pool_uses_.count({device, to_pool(mempool_id)}) == 0) return;
  }
  change_pool_options(device, mempool_id, "setUseOnOOM",
                      [use_on_oom](pool_options& options) { options.use_on_oom = use_on_oom; });
}

void torch_allocator::setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  change_pool_options(device, mempool_id, "setNoSplit", [](pool_options& options) { options.no_split = true; });
}

bool torch_allocator::checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                               const std::unordered_set<void*>& expected_live_allocations) {
  std::size_t live = 0;
  for (const segment_info& s : segments_of(device, mempool_id)) {
    if (s.pool.is_default()) continue;
    for (const block_info& b : s.blocks) {
      if (b.state != block_state::active_allocated) continue;
      ++live;
      if (expected_live_allocations.count(reinterpret_cast<void*>(b.address)) == 0) return false;
    }
  }
  return live == expected_live_allocations.size();
}

std::shared_ptr<c10a::AllocatorState> torch_allocator::getCheckpointState(c10::DeviceIndex device,
                                                                          c10::MempoolId_t id) {
  auto state = std::make_shared<pool_checkpoint>();  // Note [Checkpoint of a pool]
  state->device = device;
  state->pool = id;
  for (const segment_info& s : segments_of(device, id)) {
    if (s.pool.is_default()) continue;
    for (const block_info& b : s.blocks) {
      if (b.state == block_state::active_allocated) state->live.emplace_back(b.address, b.size);
    }
  }
  std::sort(state->live.begin(), state->live.end());
  return state;
}

c10a::CheckpointDelta torch_allocator::setCheckpointPoolState(c10::DeviceIndex device,
                                                              std::shared_ptr<c10a::AllocatorState> pps) {
  auto* checkpoint = dynamic_cast<pool_checkpoint*>(pps.get());
  TORCH_CHECK(checkpoint != nullptr, "streampool: setCheckpointPoolState got a state streampool did not make");
  TORCH_CHECK(checkpoint->device == device, "streampool: setCheckpointPoolState: the checkpoint is of device ",
              static_cast<int>(checkpoint->device), ", not ", static_cast<int>(device));
  std::vector<std::pair<std::uintptr_t, std::size_t>> now;  // address, size; sorted
  for (const segment_info& s : segments_of(device, checkpoint->pool)) {
    if (s.pool.is_default()) continue;
    for (const block_info& b : s.blocks) {
      if (b.state == block_state::active_allocated) now.emplace_back(b.address, b.size);
    }
  }
  std::sort(now.begin(), now.end());
  c10a::CheckpointDelta delta;
  for (const auto& allocation : now) {  // allocated since the checkpoint (or resized): freed
    if (std::binary_search(checkpoint->live.begin(), checkpoint->live.end(), allocation)) continue;
    raw_delete(reinterpret_cast<void*>(allocation.first));
    delta.ptrs_freed.push_back(reinterpret_cast<void*>(allocation.first));
  }
  for (const auto& allocation : checkpoint->live) {  // freed since the checkpoint: made again
    if (std::binary_search(now.begin(), now.end(), allocation)) continue;
    const auto [address, size] = allocation;
    try {
      (void)impl().allocate_at(reinterpret_cast<void*>(address), size, to_pool(checkpoint->pool), device);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "streampool: cannot restore the checkpoint of private pool ", pool_text(checkpoint->pool),
                  ": its allocation at 0x", std::hex, address, std::dec, " (", size,
                  " bytes) was freed since and cannot be made again there: ", e.what(),
                  ". torch.compile(mode=\"reduce-overhead\") needs this when a new CUDA graph branches off a replayed "
                  "one; use mode=\"max-autotune-no-cudagraphs\" for such programs, or the native backend.");
    }
  }
  for (const auto& [address, size] : checkpoint->live) {
    void* ptr = reinterpret_cast<void*>(address);
    delta.dataptrs_allocd.emplace_back(ptr, ptr, raw_deleter(), c10::Device(c10::DeviceType::CUDA, device));
  }
  return delta;
}

}  // namespace streampool::torch_ext
