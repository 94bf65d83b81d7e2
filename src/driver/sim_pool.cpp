// sim_pool.cpp — the simulated stream-ordered pools' memory (cudaMallocAsync emulation): chunks
// reserved from the device in 32 MiB units, best-fit blocks split and merged inside a chunk,
// stream-ordered reuse of freed blocks, used/reserved accounting, settling and trimming.
// Pool handles, attributes and access are in sim_pool_attrs.cpp.
#include <algorithm>
#include <vector>

#include "driver/sim_state.hpp"

namespace streampool {

// Note [Pool reuse rules]
// A freed block is "pending" on its freeing stream until the free is known to be done:
//  - on the freeing stream it is reusable at once (stream order makes that safe);
//  - on another stream it is reusable when the freeing stream has completed the free and
//    reuse_allow_opportunistic is on, or when the allocating stream waits (stream_wait_event) on
//    an event recorded at or after the free and reuse_follow_event_dependencies is on;
//  - after a synchronisation that observed the free (stream/device/event synchronize) it is
//    "settled": reusable anywhere, whatever the attributes ("reuse still happens after a host
//    sync"). With opportunistic reuse on, a free that is already complete settles at once, so in
//    eager mode every free settles immediately.
// reuse_allow_internal_dependencies is stored and reported but not modelled: the sim never
// inserts a stream dependency in order to reuse memory (the real driver may).
// Adjacent free blocks merge when both are settled, or both pending on the same stream (the
// merged block waits for the later free); a settled block never merges with a pending one.

// Note [Pool accounting]
// Measured on the H200 (CUDA 13.0, driver 580): blocks are 512 B aligned and packed; used_mem
// counts the exact bytes requested (1 byte -> 1); a pool reserves whole 32 MiB units (1 byte ->
// 32 MiB, 33 MiB -> 64 MiB, 1 GiB -> 1 GiB); with release_threshold 0 a synchronize releases
// every idle byte. The sim keeps those rules but in separate chunks: a miss reserves a new chunk
// of the 512 B-rounded request rounded up to 32 MiB, charged to the device (out_of_memory when
// it does not fit). The real pool grows its address range in place, so one request can span the
// free tail of the last chunk and new memory; the sim then reserves somewhat more. The sim never
// releases idle chunks to make room (a real pool may): callers trim and retry. Idle chunks (no
// live block) are released at synchronisation points while reserved > release_threshold
// (default 0: trim at every sync), by pool_trim_to, and at once for destroyed pools.
namespace {

bool compatible(const sim::block_rec* a, const sim::block_rec* b) noexcept {
  return a != nullptr && b != nullptr && a->free && b->free &&
         ((a->settled && b->settled) || (!a->settled && !b->settled && a->stream == b->stream));
}

void remove_free(sim::pool_rec& pool, sim::block_rec* block) {
  pool.free_blocks.erase(block);
  if (!block->settled) {
    pool.pending.erase(block);
  }
}

void insert_free(sim::pool_rec& pool, sim::block_rec* block) {
  pool.free_blocks.insert(block);
  if (!block->settled) {
    pool.pending.insert(block);
  }
}

/// Absorbs `victim` (the next block of `keeper`) into `keeper`; `victim` must be off the indexes.
void absorb(sim::block_rec* keeper, sim::block_rec* victim) noexcept {
  keeper->size += victim->size;
  keeper->target = std::max(keeper->target, victim->target);
  keeper->next = victim->next;
  if (victim->next != nullptr) {
    victim->next->prev = keeper;
  }
  delete victim;
}

/// Merges free `block` (not in the indexes) with compatible neighbours and indexes the result.
void merge_and_insert(sim::pool_rec& pool, sim::block_rec* block) {
  if (compatible(block->prev, block)) {
    sim::block_rec* prev = block->prev;
    remove_free(pool, prev);
    absorb(prev, block);
    block = prev;
  }
  if (compatible(block, block->next)) {
    remove_free(pool, block->next);
    absorb(block, block->next);
  }
  insert_free(pool, block);
}

bool usable(const sim::pool_rec& pool, const sim::block_rec* block, std::uint32_t stream,
            const std::vector<sim::stream_rec>& streams) noexcept {
  if (block->settled || block->stream == stream) {
    return true;
  }
  if (pool.allow_opportunistic && streams[block->stream].completed >= block->target) {
    return true;
  }
  if (pool.follow_event_dependencies) {
    for (const sim::wait_dep& wait : streams[stream].waits) {
      if (wait.stream == block->stream && wait.target >= block->target) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

sim::chunk_rec::~chunk_rec() {
  while (first != nullptr) {
    block_rec* next = first->next;
    delete first;
    first = next;
  }
}

sim::pool_rec* sim_driver::state::find_pool(mempool_t pool) const noexcept {
  const std::uint32_t index = sim::handle_index(pool, sim::pool_handle_base, pools_.size());
  return index == sim::no_stream || !pools_[index]->alive ? nullptr : pools_[index].get();
}

std::uint32_t sim_driver::state::add_pool(int device, bool is_default) {
  auto pool = std::make_unique<sim::pool_rec>();
  pool->device = device;
  pool->is_default = is_default;
  pool->peers = std::uint64_t{1} << device;
  pools_.push_back(std::move(pool));
  return static_cast<std::uint32_t>(pools_.size() - 1);
}

void sim_driver::state::settle_pending(sim::pool_rec& pool) {
  if (pool.pending.empty()) {
    return;
  }
  std::vector<sim::block_rec*> done;
  for (sim::block_rec* block : pool.pending) {
    if (stream_done(block->stream, block->target)) {
      done.push_back(block);
    }
  }
  // Each merge only absorbs settled neighbours, never a block still waiting in `done`.
  for (sim::block_rec* block : done) {
    remove_free(pool, block);
    block->settled = true;
    block->stream = sim::no_stream;
    merge_and_insert(pool, block);
  }
}

void sim_driver::state::trim(sim::pool_rec& pool, std::size_t keep, bool force) {
  if (pool.idle_chunks == 0 || pool.reserved <= keep) {
    return;
  }
  std::vector<std::uintptr_t> idle;
  for (auto it = pool.chunks.rbegin(); it != pool.chunks.rend(); ++it) {
    const sim::chunk_rec& chunk = *it->second;
    if (chunk.live != 0) {
      continue;
    }
    bool releasable = true;
    for (const sim::block_rec* block = chunk.first; block != nullptr && !force; block = block->next) {
      releasable = releasable && (block->settled || stream_done(block->stream, block->target));
    }
    if (releasable) {
      idle.push_back(it->first);
    }
  }
  for (const std::uintptr_t base : idle) {
    if (pool.reserved <= keep) {
      break;
    }
    release_chunk(pool, base);
  }
}

void sim_driver::state::release_chunk(sim::pool_rec& pool, std::uintptr_t base) {
  const auto found = pool.chunks.find(base);
  sim::chunk_rec& chunk = *found->second;
  for (sim::block_rec* block = chunk.first; block != nullptr; block = block->next) {
    remove_free(pool, block);
  }
  pool.reserved -= chunk.size;
  devices_[static_cast<std::size_t>(pool.device)].pool_bytes -= chunk.size;
  pool.idle_chunks -= chunk.live == 0 ? 1 : 0;
  pool.chunks.erase(found);  // ~chunk_rec deletes the blocks
}

// --- stream-ordered allocation -------------------------------------------------------------

drv_result sim_driver::malloc_async(mempool_t pool, std::size_t bytes, stream_t stream, void** out) noexcept {
  return state_->run(counters_, driver_call::malloc_async, [&] {
    *out = nullptr;
    sim::pool_rec* rec = state_->find_pool(pool);
    const std::uint32_t stream_index = state_->find_stream(stream);
    if (rec != nullptr && stream_index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (rec == nullptr || stream_index == sim::no_stream) {
      return sim::fail(status::invalid_value);
    }
    if (state_->refuses_uncaptured(stream_index)) {  // Note [Relaxed uncaptured calls]
      return state_->refuse_in_capture();
    }
    if (bytes == 0) {
      return drv_result{};
    }
    sim::device_rec& device = state_->devices_[static_cast<std::size_t>(rec->device)];
    if (bytes > options_.capacity) {
      return state_->out_of_memory(rec->device);
    }
    const std::size_t need = sim::round_up(bytes, sim::pool_block_unit);
    sim::block_rec* block = nullptr;
    for (auto it = rec->free_blocks.lower_bound(sim::block_order::key{need, 0}); it != rec->free_blocks.end(); ++it) {
      if (usable(*rec, *it, stream_index, state_->streams_)) {
        block = *it;
        break;
      }
    }
    if (block == nullptr) {  // grow: a new chunk holding one free block
      const std::size_t chunk_size = sim::round_up(need, sim::pool_chunk_unit);
      if (chunk_size > options_.capacity - std::min(device.in_use(), options_.capacity)) {
        return state_->out_of_memory(rec->device);
      }
      const std::uintptr_t base = state::bump(device.pool_next, device.pool_end, chunk_size, sim::pool_chunk_unit);
      if (base == 0) {
        return sim::fail(status::other, sim::reason_address_space);
      }
      auto chunk = std::make_unique<sim::chunk_rec>();
      chunk->base = base;
      chunk->size = chunk_size;
      chunk->pool = rec;
      block = new sim::block_rec{base, chunk_size, chunk.get()};
      chunk->first = block;
      rec->chunks.emplace(base, std::move(chunk));
      rec->free_blocks.insert(block);
      ++rec->idle_chunks;
      rec->reserved += chunk_size;
      rec->reserved_high = std::max(rec->reserved_high, rec->reserved);
      device.pool_bytes += chunk_size;
    }
    remove_free(*rec, block);
    if (block->size > need) {  // split: the tail stays free, in the same state
      auto* tail = new sim::block_rec(*block);
      tail->addr = block->addr + need;
      tail->size = block->size - need;
      tail->prev = block;
      if (block->next != nullptr) {
        block->next->prev = tail;
      }
      block->next = tail;
      block->size = need;
      insert_free(*rec, tail);
    }
    block->requested = bytes;
    block->free = false;
    block->settled = true;
    block->stream = sim::no_stream;
    block->target = 0;
    if (block->chunk->live++ == 0) {
      --rec->idle_chunks;
    }
    rec->used += bytes;
    rec->used_high = std::max(rec->used_high, rec->used);
    state_->async_live_.emplace(block->addr, block);
    *out = reinterpret_cast<void*>(block->addr);
    return drv_result{};
  });
}

drv_result sim_driver::free_async(void* ptr, stream_t stream) noexcept {
  return state_->run(counters_, driver_call::free_async, [&] {
    const std::uint32_t stream_index = state_->find_stream(stream);
    if (stream_index == sim::no_stream) {
      return state_->stream_failure(stream);
    }
    if (state_->refuses_uncaptured(stream_index)) {  // Note [Relaxed uncaptured calls]
      return state_->refuse_in_capture();
    }
    if (ptr == nullptr) {
      return drv_result{};
    }
    const auto found = state_->async_live_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (found == state_->async_live_.end()) {
      return sim::fail(status::invalid_value);
    }
    sim::block_rec* block = found->second;
    state_->async_live_.erase(found);
    sim::chunk_rec* chunk = block->chunk;
    sim::pool_rec& pool = *chunk->pool;
    block->free = true;
    block->stream = stream_index;
    block->target = state_->submit(stream_index);
    block->settled = pool.allow_opportunistic && state_->stream_done(stream_index, block->target);
    if (block->settled) {
      block->stream = sim::no_stream;
    }
    pool.used -= block->requested;
    block->requested = 0;
    if (--chunk->live == 0) {
      ++pool.idle_chunks;
    }
    merge_and_insert(pool, block);
    if (!pool.alive && chunk->live == 0) {
      state_->release_chunk(pool, chunk->base);
    }
    return drv_result{};
  });
}

}  // namespace streampool
