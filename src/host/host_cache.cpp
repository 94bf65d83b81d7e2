// host_cache.cpp — allocate / deallocate / record_stream / empty_cache of the pinned host caching
// allocator (see host_cache.hpp; the behaviour is described in docs/pytorch-compatibility.md
// "Pinned host memory").
//
// Note [Host block life cycle]
// A block is in use (allocated), then freed: with no stream recorded it goes straight back to the
// free list of its size; else one event is recorded per stream at deallocate and the block is
// pending until every event has been seen complete (queried at allocation, empty_cache or by the
// background thread; never waited for). allocation / allocated_bytes count blocks from handout
// until they are reusable, as PyTorch's do. If an event cannot be created or recorded for a
// stream, deallocate waits for that stream instead (the only wait, and only on that failure); if
// even that fails, the block is retired: never reused, given back only when the allocator is
// destroyed, after synchronising the devices. Nothing is lost either way.
//
// Note [Host OOM retry]
// When the driver cannot pin a new block, the cache is emptied once (cached blocks of other
// sizes are given back) and the request is tried again before out_of_memory reaches the caller.
// PyTorch's host allocator fails at once.
#include "host/host_cache.hpp"

#include <algorithm>
#include <string>

#include "core/format.hpp"
#include "core/warnings.hpp"
#include "host/background_poller.hpp"
#include "streampool/allocator.hpp"  // max_request_bytes: the request limit the device allocators share
#include "streampool/errors.hpp"

namespace streampool::host {
namespace {

std::string pointer_text(const void* ptr) { return core::format_pointer(ptr); }

}  // namespace

host_cache::host_cache(allocator_config config, std::shared_ptr<driver> drv)
    : config_(std::move(config)), driver_(std::move(drv)), source_(config_, *driver_), events_(*driver_) {
  if (config_.pinned_use_background_threads) poller_ = std::make_unique<background_poller>(*this);
}

host_cache::~host_cache() {
  poller_.reset();  // the thread stops before the tables go
  const std::lock_guard lock(mutex_);
  events_.wait_all([](host_block* block) { --block->pending_events; });
  const bool any_retired =
      std::any_of(blocks_.begin(), blocks_.end(), [](const auto& entry) { return entry.second->retired; });
  if (any_retired) {
    int count = 0;
    (void)driver_->device_count(&count);
    for (int device = 0; device < count; ++device) (void)driver_->device_synchronize(device);
  }
  for (const auto& [ptr, block] : blocks_) {
    if (block->origin != block_origin::reserve) (void)source_.release(block->ptr);
  }
  blocks_.clear();
  source_.release_reserve();
}

void* host_cache::allocate(std::size_t bytes) {
  if (bytes == 0) {
    throw error("streampool host allocator: allocate(0): a pinned buffer needs at least 1 byte");
  }
  if (bytes >= max_request_bytes) {
    throw out_of_memory("streampool host allocator: a pinned request of " + std::to_string(bytes) + " bytes (" +
                            format_size(bytes) + ") is larger than 1 EiB; no host can pin that much",
                        bytes, -1);
  }
  const std::size_t size = round_block_size(bytes);
  {
    const std::lock_guard lock(mutex_);
    if (!poller_) process_events_locked();
    if (host_block* block = take_cached(size, bytes)) return block->ptr;
    if (poller_) {  // the thread may not have looked yet: look once before obtaining memory
      process_events_locked();
      if (host_block* block = take_cached(size, bytes)) return block->ptr;
    }
  }
  try {
    return allocate_new(size, bytes);
  } catch (const out_of_memory&) {
    empty_cache();  // Note [Host OOM retry]
    return allocate_new(size, bytes);
  }
}

host_block* host_cache::take_cached(std::size_t size, std::size_t requested) {
  std::vector<host_block*>& list = free_[size_class(size)];
  if (list.empty()) return nullptr;
  host_block* block = list.back();
  list.pop_back();
  block->allocated = true;
  block->requested = requested;
  allocation_.increase(1);
  allocated_bytes_.increase(static_cast<std::int64_t>(size));
  return block;
}

void* host_cache::allocate_new(std::size_t size, std::size_t requested) {
  void* ptr = nullptr;
  const block_origin origin = source_.obtain(size, &ptr);
  try {
    auto block = std::make_unique<host_block>();
    block->ptr = ptr;
    block->size = size;
    block->requested = requested;
    block->origin = origin;
    block->allocated = true;
    const std::lock_guard lock(mutex_);
    blocks_.emplace(ptr, std::move(block));
    allocation_.increase(1);
    allocated_bytes_.increase(static_cast<std::int64_t>(size));
  } catch (...) {
    if (origin != block_origin::reserve) (void)source_.release(ptr);
    throw;
  }
  return ptr;
}

void host_cache::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  host_block* block = nullptr;
  std::vector<stream_t> streams;
  {
    const std::lock_guard lock(mutex_);
    const auto found = blocks_.find(ptr);
    if (found == blocks_.end()) {
      throw error("streampool host allocator: deallocate(" + pointer_text(ptr) +
                  "): not a pointer this host allocator handed out (memory of another allocator, or not "
                  "the start of a block); nothing was freed");
    }
    block = found->second.get();
    if (!block->allocated) {
      throw error("streampool host allocator: deallocate(" + pointer_text(ptr) +
                  "): this block was already freed (double free); nothing was changed");
    }
    block->allocated = false;
    streams.swap(block->streams);
    if (streams.empty()) {
      make_reusable(block);
      return;
    }
  }
  record_free_events(block, streams);
}

void host_cache::record_free_events(host_block* block, const std::vector<stream_t>& streams) {
  std::vector<std::pair<stream_t, pending_event>> recorded;
  recorded.reserve(streams.size());
  bool retire = false;
  for (const stream_t stream : streams) {
    const int device = device_of(stream);
    event_t event = nullptr;
    try {
      event = events_.acquire(device);
    } catch (const std::exception&) {
      event = nullptr;
    }
    if (event != nullptr && driver_->event_record(event, stream).ok()) {
      recorded.emplace_back(stream, pending_event{event, device, block});
      continue;
    }
    if (event != nullptr) events_.release(device, event);
    // Note [Host block life cycle]: no event, so wait for the stream's work (failure path only).
    if (!driver_->stream_synchronize(device, stream).ok()) retire = true;
  }
  try {
    const std::lock_guard lock(mutex_);
    for (const auto& [stream, entry] : recorded) {
      events_.push(stream, entry);
      ++block->pending_events;
    }
    if (retire) {
      block->retired = true;
    } else if (block->pending_events == 0) {
      make_reusable(block);
    }
  } catch (...) {
    // push could not grow a queue: the block cannot be tracked, so it is retired (never reused).
    const std::lock_guard lock(mutex_);
    block->retired = true;
  }
  if (retire) {
    warn("streampool host allocator: could not record an event or wait on a stream that used pinned block " +
         pointer_text(block->ptr) + "; the block is set aside and given back when the allocator is destroyed");
  }
}

void host_cache::make_reusable(host_block* block) {
  block->requested = 0;
  free_[size_class(block->size)].push_back(block);
  allocation_.decrease(1);
  allocated_bytes_.decrease(static_cast<std::int64_t>(block->size));
}

void host_cache::process_events() {
  const std::lock_guard lock(mutex_);
  process_events_locked();
}

void host_cache::process_events_locked() {
  events_.drain([&](host_block* block) {
    if (--block->pending_events == 0 && !block->retired) make_reusable(block);
  });
}

int host_cache::device_of(stream_t stream) const {
  int device = 0;
  if (driver_->stream_get_device(stream, &device).ok()) return device;
  device = 0;
  (void)driver_->get_device(&device);
  return device;
}

void host_cache::record_stream(void* ptr, stream_t stream) {
  int device = 0;
  // A destroyed stream fails as a bad handle or, on the real driver, as "invalid device context"
  // (Note [Sim destroyed streams]); a driver without the query cannot tell, and is trusted.
  const drv_result known = driver_->stream_get_device(stream, &device);
  if (!known.ok() && known.code != status::not_supported) {
    throw error("streampool host allocator: record_stream(" + pointer_text(ptr) + ", stream " + pointer_text(stream) +
                "): not a live stream (destroyed, or not a stream handle)");
  }
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(ptr);
  if (found == blocks_.end()) {
    throw error("streampool host allocator: record_stream(" + pointer_text(ptr) +
                "): not a pointer this host allocator handed out (memory of another allocator, or not the "
                "start of a block)");
  }
  host_block& block = *found->second;
  if (!block.allocated) {
    throw error("streampool host allocator: record_stream(" + pointer_text(ptr) +
                "): the block was already freed; record streams before deallocate()");
  }
  if (std::find(block.streams.begin(), block.streams.end(), stream) == block.streams.end()) {
    block.streams.push_back(stream);
  }
}

void host_cache::empty_cache() {
  std::vector<std::unique_ptr<host_block>> victims;
  {
    const std::lock_guard lock(mutex_);
    process_events_locked();
    for (std::vector<host_block*>& list : free_) {
      auto keep = std::stable_partition(list.begin(), list.end(),
                                        [](const host_block* b) { return b->origin == block_origin::reserve; });
      for (auto it = keep; it != list.end(); ++it) {
        auto node = blocks_.extract((*it)->ptr);
        victims.push_back(std::move(node.mapped()));
      }
      list.erase(keep, list.end());
    }
  }
  drv_result first_failure{};
  std::vector<std::unique_ptr<host_block>> kept;
  for (std::unique_ptr<host_block>& block : victims) {
    const drv_result result = source_.release(block->ptr);
    if (!result.ok()) {
      if (first_failure.ok()) first_failure = result;
      kept.push_back(std::move(block));
    }
  }
  if (kept.empty()) return;
  {
    const std::lock_guard lock(mutex_);
    for (std::unique_ptr<host_block>& block : kept) {
      free_[size_class(block->size)].push_back(block.get());
      const void* key = block->ptr;
      blocks_.emplace(key, std::move(block));
    }
  }
  throw cuda_error("streampool host allocator: empty_cache could not give " + std::to_string(kept.size()) +
                       " pinned block(s) back: " + driver_->describe(first_failure) + " (they stay cached)",
                   first_failure.native);
}

host_memory_stats host_cache::stats() const {
  host_memory_stats out;
  {
    const std::lock_guard lock(mutex_);
    out.allocation = allocation_;
    out.allocated_bytes = allocated_bytes_;
  }
  source_.add_stats(out);
  return out;
}

void host_cache::reset_peak_stats() {
  {
    const std::lock_guard lock(mutex_);
    allocation_.reset_peak();
    allocated_bytes_.reset_peak();
  }
  source_.reset_peak();
}

void host_cache::reset_accumulated_stats() {
  {
    const std::lock_guard lock(mutex_);
    allocation_.reset_accumulated();
    allocated_bytes_.reset_accumulated();
  }
  source_.reset_accumulated();
}

bool host_cache::owns(const void* ptr) const {
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(ptr);
  return found != blocks_.end() && found->second->allocated;
}

host_snapshot host_cache::snapshot() const {
  host_snapshot out;
  {
    const std::lock_guard lock(mutex_);
    out.blocks.reserve(blocks_.size());
    for (const auto& [ptr, block] : blocks_) {
      host_block_info info;
      info.address = reinterpret_cast<std::uintptr_t>(block->ptr);
      info.size = block->size;
      info.requested_size = block->requested;
      info.from_reserve = block->origin == block_origin::reserve;
      info.pending_events = block->pending_events;
      const bool cached = std::find(free_[size_class(block->size)].begin(), free_[size_class(block->size)].end(),
                                    block.get()) != free_[size_class(block->size)].end();
      info.state = block->allocated ? host_block_state::in_use
                   : cached         ? host_block_state::cached
                                    : host_block_state::pending;
      out.blocks.push_back(info);
    }
  }
  std::sort(out.blocks.begin(), out.blocks.end(),
            [](const host_block_info& a, const host_block_info& b) { return a.address < b.address; });
  out.segments = source_.segments();
  out.stats = stats();
  out.allocator_settings = std::string("pinned_use_cuda_host_register:") +
                           (config_.pinned_use_cuda_host_register ? "True" : "False") +
                           ",pinned_num_register_threads:" + std::to_string(config_.pinned_num_register_threads) +
                           ",pinned_use_background_threads:" +
                           (config_.pinned_use_background_threads ? "True" : "False") +
                           ",pinned_reserve_segment_size_mb:" + std::to_string(config_.pinned_reserve_segment_size_mb);
  return out;
}

}  // namespace streampool::host
