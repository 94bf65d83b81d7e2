// private_pools.cpp — the blocks of the cudaMallocAsync backend's private pools (private_pools.hpp):
// a routed allocation's new block or reused idle one, its free back into the pool, and the idle
// blocks given back to the device once the pool is released.
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
#include "async/private_pools.hpp"

#include <string>

#include "core/format.hpp"
#include "core/provider_memory.hpp"
#include "streampool/errors.hpp"

namespace streampool::async {
namespace {

constexpr std::size_t cuda_malloc_page = std::size_t{2} << 20;

}  // namespace

std::size_t private_pools::new_block_size(std::size_t bytes) noexcept {
  // What cudaMalloc charges for the request's footprint (Note [Private pools of the cudaMallocAsync backend]).
  const std::size_t need = async_footprint(bytes);
  return need < cuda_malloc_page ? need : (need + cuda_malloc_page - 1) / cuda_malloc_page * cuda_malloc_page;
}

allocation_record private_pools::routed_record(const private_pool& pool, std::size_t bytes, stream_t stream) const {
  allocation_record record;
  record.device = device_;
  record.size = bytes;
  record.stream = stream;
  record.pool = pool.id;
  record.captured = true;
  return record;
}

void* private_pools::reuse(private_pool& pool, std::size_t bytes, stream_t stream) {
  private_memory& memory = pool.memory;
  const std::size_t need = async_footprint(bytes);
  // An idle block of this pool on this stream: the smallest of at least `need` bytes, at most 2x.
  const auto fit = memory.idle.lower_bound({stream, need});
  if (fit == memory.idle.end() || fit->first.first != stream || fit->first.second / 2 > need) return nullptr;
  const std::uintptr_t address = fit->second;
  private_block& block = memory.blocks.at(address);
  void* ptr = reinterpret_cast<void*>(address);
  pointers_->insert(ptr, routed_record(pool, bytes, stream));  // bad_alloc: nothing changed
  memory.idle.erase(fit);
  block.idle = false;
  ++memory.live;
  idle_bytes_ -= block.size;
  accounting_->on_reuse(bytes);
  trace_.record(trace_action::alloc, address, bytes, stream, pool.id);
  return ptr;
}

void* private_pools::add_block(private_pool& pool, std::size_t bytes, std::size_t size, stream_t stream) {
  private_memory& memory = pool.memory;
  allocation_record record = routed_record(pool, bytes, stream);
  // Host bookkeeping first, so that nothing can fail once the device memory exists: a placeholder
  // node (key 0, never an address) is re-keyed below without allocating.
  memory.blocks.emplace(0, private_block{});
  void* ptr = nullptr;
  const std::shared_ptr<const segment_provider> provider = pool.options.provider;
  const drv_result result = [&] {
    const relaxed_thread_scope relaxed(*driver_, true);  // Note [Relaxed capture mode]
    if (!relaxed.refusal().ok()) return relaxed.refusal();  // a cudaMalloc would break the capture
    if (provider == nullptr) return driver_->malloc(device_, size, &ptr);
    try {
      ptr = core::allocate_from_provider(*provider, size, device_, stream);  // Note [Pool options]
    } catch (...) {
      memory.blocks.erase(0);
      throw;
    }
    return ptr != nullptr ? drv_result{} : drv_result{status::out_of_memory, 0};
  }();
  if (!result.ok()) {
    memory.blocks.erase(0);
    if (result.code == status::out_of_memory) return nullptr;
    throw cuda_error("streampool: cudaMalloc of " + format_size(size) + " for private pool {" +
                         std::to_string(pool.id.first) + "," + std::to_string(pool.id.second) + "} on device " +
                         std::to_string(device_) + " (cudaMallocAsync backend) failed: " +
                         driver_->describe(result),
                     result.native);
  }
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  auto node = memory.blocks.extract(0);
  node.key() = address;
  node.mapped() = private_block{size, stream, false, provider};
  memory.blocks.insert(std::move(node));
  memory.bytes += size;
  ++memory.live;
  bytes_ += size;
  accounting_->on_alloc(bytes);
  pool_->sample_reserved(*accounting_, bytes_);  // the reserve grew: fold it into the peak now
  try {
    pointers_->insert(ptr, std::move(record));
  } catch (...) {
    // Host memory exhausted: the block stays with the pool, idle (or, failing that, live until
    // the pool's memory is given back at teardown).
    try {
      memory.idle.emplace(std::pair{stream, size}, address);
      memory.blocks.at(address).idle = true;
      --memory.live;
      idle_bytes_ += size;
      accounting_->on_free_requested(bytes);
      accounting_->on_idle(bytes);
    } catch (...) {
    }
    throw;
  }
  trace_.record(trace_action::segment_alloc, address, size, stream, pool.id);
  trace_.record(trace_action::alloc, address, bytes, stream, pool.id);
  return ptr;
}

void private_pools::take_back(private_pool& pool, void* ptr, const allocation_record& record) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  // A live block keeps its pool known (it is forgotten only without blocks).
  private_block& block = pool.memory.blocks.at(address);
  pool.memory.idle.emplace(std::pair{block.stream, block.size}, address);  // bad_alloc: nothing changed
  block.idle = true;
  --pool.memory.live;
  idle_bytes_ += block.size;
  accounting_->on_free_requested(record.size);
  accounting_->on_idle(record.size);
  trace_.record(trace_action::free_requested, address, record.size, record.stream, record.pool);
  trace_.record(trace_action::free_completed, address, record.size, record.stream, record.pool);
}

bool private_pools::release_idle(private_pool& pool) noexcept {
  private_memory& memory = pool.memory;
  for (auto it = memory.idle.begin(); it != memory.idle.end();) {
    const std::uintptr_t address = it->second;
    const std::size_t size = it->first.second;
    if (!free_block_memory(address, memory.blocks.at(address))) {
      ++it;  // kept for a later empty_cache
      continue;
    }
    it = memory.idle.erase(it);
    memory.blocks.erase(address);
    memory.bytes -= size;
    bytes_ -= size;
    idle_bytes_ -= size;
    accounting_->on_segment_release(size);
    trace_.record(trace_action::segment_free, address, size, nullptr, pool.id);
  }
  return memory.blocks.empty();  // a block still live keeps the pool until it is freed
}

void private_pools::free_all(const private_pool& pool) noexcept {
  for (const auto& [address, block] : pool.memory.blocks) (void)free_block_memory(address, block);
}

bool private_pools::free_block_memory(std::uintptr_t address, const private_block& block) noexcept {
  void* ptr = reinterpret_cast<void*>(address);
  if (block.provider == nullptr) return driver_->free(device_, ptr).ok();
  try {
    block.provider->deallocate(ptr, block.size, device_, block.stream);
    return true;
  } catch (...) {
    return false;  // kept for a later empty_cache
  }
}

void private_pools::extend_to_block(segment_info& segment, const private_pool* pool) {
  // The part beyond the request's footprint (a reused larger block, or the rest of a 2 MiB page)
  // is an inactive block, so that allocated and active bytes agree with the statistics.
  if (pool == nullptr) return;
  const auto block = pool->memory.blocks.find(segment.address);
  const std::size_t size = block == pool->memory.blocks.end() ? 0 : block->second.size;
  if (size > segment.total_size) {
    segment.blocks.push_back(block_info{segment.address + segment.total_size, size - segment.total_size, 0,
                                        block_state::inactive, segment.stream});
    segment.total_size = size;
  }
}

void private_pools::append_idle_segments(const private_pool& pool, std::vector<segment_info>& out) const {
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
}

}  // namespace streampool::async
