// async_private_pool.cpp — the private pools of the cudaMallocAsync backend: allocations that a
// begin_allocate_to_pool recording routes (graph captures) get blocks of device memory that the
// private pool owns, reused only by later allocations into that same pool, and given back to the
// device when the pool is released and empty. See Note [Private pools of the cudaMallocAsync backend].
//
// Note [Private pools of the cudaMallocAsync backend]
// Why not cudaMallocAsync on the capturing stream: under capture it becomes a graph allocation
// node, memory the graph owns. Such memory cannot be freed eagerly before the graph has been
// launched (cudaFreeAsync refuses it: "invalid argument"), and PyTorch's cudagraph trees
// (torch.compile mode="reduce-overhead") do exactly that: they free capture-time allocations
// (the cuBLAS workspace, dead intermediates) right after each capture, before the first replay,
// and keep private-pool addresses across several graphs of one tree. So the backend does what the
// native backend and PyTorch's private pools do: the graph merely *uses* memory of the pool.
//  - Where the memory comes from: cudaMalloc of the request rounded up to 512 bytes (below
//    2 MiB) or to 2 MiB (from 2 MiB: cudaMalloc aligns such blocks to 2 MiB pages and the device
//    is charged whole pages, so the block's size is what it really occupies, and reserved_bytes
//    equals the device memory held), with the thread in relaxed capture mode (relaxed_thread_scope: a global capture would otherwise
//    refuse it and be invalidated; the native backend makes its capture-time segments the same
//    way, which the H200 runs). cudaMalloc memory is valid as soon as the call returns, so no
//    stream ordering is needed between obtaining it and the graph's first replay, and nothing of
//    it is ever part of the stream-ordered pool: eager cudaMallocAsync can never be handed an
//    address the graph has baked in. (The alternatives weighed: a relaxed cudaMallocAsync on an
//    internal stream needs an event or a host synchronisation before the first replay, and its
//    pool may hand out memory freed by another stream whose work is still running; a cudaMemPool
//    per private pool adds a pool, a stream and 32 MiB reserve granules per pool. cudaMalloc has
//    neither problem, and frees happen only at empty_cache, which synchronises anyway.)
//  - Free: the block goes back to its pool, idle, with no driver call (record_stream streams are
//    waited for first, by event record + stream wait, legal under capture: Note [record_stream by
//    stream wait]). This works during the capture (PyTorch's private pools reuse a block freed
//    inside the capture for a later allocation of the same capture: stream order inside the
//    graph makes that safe), after it, before or after replays.
//  - Reuse: only by allocations routed to the same pool, on the stream the block was allocated
//    on (PyTorch keys its blocks by stream too), best fit among idle blocks of at least the
//    rounded request and at most twice it (blocks are not split; the bound keeps the waste of
//    one block under half). Graphs sharing a pool must then be replayed in capture order, as
//    with PyTorch (docs/graph-capture.md).
//  - Release: release_pool only drops a use (Note [Released pools]); once the pool is freeable,
//    empty_cache (and the synchronise-and-trim retry of an allocation that ran out of memory)
//    cudaFree's its idle blocks after synchronising the device, and forgets the pool once it has
//    no block left: a block still live is given back at the first empty_cache after its free.
//    While the pool is in use its memory stays, so every replay finds its addresses valid.
//  - Accounting: a new block is a segment (+1 segment, num_device_alloc, allocation, active);
//    reuse and free change allocation/active only; cudaFree at release drops the segment
//    (num_device_free). Private blocks count in reserved_bytes, and idle ones in the bytes the
//    memory-fraction cap compares (they are held). allocated/active bytes use the request's
//    footprint, so the slack of a reused larger block shows as reserved but not allocated.
#include <limits>
#include <string>

#include "async/async_device.hpp"
#include "core/format.hpp"

namespace streampool::async {
namespace {

constexpr std::size_t cuda_malloc_page = std::size_t{2} << 20;

/// The bytes a new block for a request of footprint `need` gets (Note [Private pools of the
/// cudaMallocAsync backend]: what cudaMalloc charges).
constexpr std::size_t new_block_size(std::size_t need) noexcept {
  return need < cuda_malloc_page ? need : (need + cuda_malloc_page - 1) / cuda_malloc_page * cuda_malloc_page;
}

}  // namespace

void* async_device::allocate_private_locked(capture_router::pool_type& pool, std::size_t bytes, stream_t stream) {
  private_memory& memory = pool.memory;
  const std::size_t need = async_footprint(bytes);
  allocation_record record;
  record.device = device_;
  record.size = bytes;
  record.stream = stream;
  record.pool = pool.id;
  record.captured = true;

  // An idle block of this pool on this stream: the smallest of at least `need` bytes, at most 2x.
  const auto fit = memory.idle.lower_bound({stream, need});
  if (fit != memory.idle.end() && fit->first.first == stream && fit->first.second / 2 <= need) {
    const std::uintptr_t address = fit->second;
    private_block& block = memory.blocks.at(address);
    void* ptr = reinterpret_cast<void*>(address);
    pointers_->insert(ptr, std::move(record));  // bad_alloc: nothing changed
    memory.idle.erase(fit);
    block.idle = false;
    ++memory.live;
    private_idle_bytes_ -= block.size;
    accounting_.on_reuse(bytes);
    trace(trace_action::alloc, address, bytes, stream, pool.id);
    return ptr;
  }

  // A new block. Note [Impossible requests] and Note [Memory fraction] as for the stream-ordered
  // pool; idle private blocks are held memory too.
  if (bytes > total_memory_) throw oom_locked(bytes, stream, pool.id, oom_cause::device_size);
  const std::size_t size = new_block_size(need);
  if (accounting_.held_bytes() + private_idle_bytes_ + size > limit_locked()) {
    throw oom_locked(bytes, stream, pool.id, oom_cause::cap);
  }
  // Host bookkeeping first, so that nothing can fail once the device memory exists: a placeholder
  // node (key 0, never an address) is re-keyed below without allocating.
  memory.blocks.emplace(0, private_block{});
  void* ptr = nullptr;
  const drv_result result = [&] {
    const relaxed_thread_scope relaxed(*driver_, true);  // Note [Relaxed capture mode]
    if (!relaxed.refusal().ok()) return relaxed.refusal();  // a cudaMalloc would break the capture
    return driver_->malloc(device_, size, &ptr);
  }();
  if (!result.ok()) {
    memory.blocks.erase(0);
    if (result.code == status::out_of_memory) throw oom_locked(bytes, stream, pool.id, oom_cause::driver);
    throw cuda_error("streampool: cudaMalloc of " + format_size(size) + " for private pool {" +
                         std::to_string(pool.id.first) + "," + std::to_string(pool.id.second) + "} on device " +
                         std::to_string(device_) + " (cudaMallocAsync backend) failed: " +
                         driver_->describe(result),
                     result.native);
  }
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  auto node = memory.blocks.extract(0);
  node.key() = address;
  node.mapped() = private_block{size, stream, false};
  memory.blocks.insert(std::move(node));
  memory.bytes += size;
  ++memory.live;
  private_bytes_ += size;
  accounting_.on_alloc(bytes);
  sample_reserved_locked();  // the reserve grew: fold it into the peak now
  try {
    pointers_->insert(ptr, std::move(record));
  } catch (...) {
    // Host memory exhausted: the block stays with the pool, idle (or, failing that, live until
    // the pool's memory is given back at teardown).
    try {
      memory.idle.emplace(std::pair{stream, size}, address);
      memory.blocks.at(address).idle = true;
      --memory.live;
      private_idle_bytes_ += size;
      accounting_.on_free_requested(bytes);
      accounting_.on_idle(bytes);
    } catch (...) {
    }
    throw;
  }
  trace(trace_action::segment_alloc, address, size, stream, pool.id);
  trace(trace_action::alloc, address, bytes, stream, pool.id);
  return ptr;
}

void async_device::free_private_locked(void* ptr, const allocation_record& record) {
  capture_router::pool_type* pool = captures_.find(record.pool);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  // A live block keeps its pool known (it is forgotten only without blocks).
  private_block& block = pool->memory.blocks.at(address);
  const bool host_synchronised = order_after_stream_uses_locked(ptr, record);  // throws before any change
  if (host_synchronised) accounting_.on_device_synchronize();
  pool->memory.idle.emplace(std::pair{block.stream, block.size}, address);  // bad_alloc: nothing changed
  block.idle = true;
  --pool->memory.live;
  private_idle_bytes_ += block.size;
  accounting_.on_free_requested(record.size);
  accounting_.on_idle(record.size);
  trace(trace_action::free_requested, address, record.size, record.stream, record.pool);
  trace(trace_action::free_completed, address, record.size, record.stream, record.pool);
}

std::size_t async_device::private_block_size(mempool_id pool, std::uintptr_t address) const noexcept {
  const capture_router::pool_type* found = captures_.find(pool);
  if (found == nullptr) return 0;
  const auto block = found->memory.blocks.find(address);
  return block == found->memory.blocks.end() ? 0 : block->second.size;
}

void async_device::release_idle_blocks_locked(capture_router::pool_type& pool) noexcept {
  private_memory& memory = pool.memory;
  for (auto it = memory.idle.begin(); it != memory.idle.end();) {
    const std::uintptr_t address = it->second;
    const std::size_t size = it->first.second;
    if (!driver_->free(device_, reinterpret_cast<void*>(address)).ok()) {
      ++it;  // kept for a later empty_cache
      continue;
    }
    it = memory.idle.erase(it);
    memory.blocks.erase(address);
    memory.bytes -= size;
    private_bytes_ -= size;
    private_idle_bytes_ -= size;
    accounting_.on_segment_release(size);
    trace(trace_action::segment_free, address, size, nullptr, pool.id);
  }
}

}  // namespace streampool::async
