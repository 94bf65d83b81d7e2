// segment_source.cpp — new segments (the only cudaMalloc and cudaFree of the native backend), the
// dispatch to expandable growth, the memory-fraction cap, and the release steps of spec
// §2.10–§2.12: garbage collection of old whole free segments, release_available_cached_blocks,
// and release_cached for one arena. GC and release_available skip expandable blocks (§2.13).
#include "native/segment_source.hpp"

#include <algorithm>
#include <string>

#include "core/format.hpp"
#include "core/provider_memory.hpp"
#include "native/stream_arena.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {
namespace {

/// Whole free segments of `a` (unsplit free blocks of malloc'd segments), small then large.
std::vector<block*> whole_free_segments(const stream_arena& a) {
  std::vector<block*> out;
  auto take = [&](block* b) {
    if (b->whole_segment()) out.push_back(b);
  };
  a.blocks().small_list().for_each(take);
  a.blocks().large_list().for_each(take);
  return out;
}

}  // namespace

segment_source::segment_source(device_context& device, segment_map& segments, std::atomic<bool>& vmm_warned)
    : device_(&device),
      segments_(&segments),
      expandable_(device, segments, counters_, vmm_warned),
      sleeper_(device, counters_) {}

// --- the cap ----------------------------------------------------------------------------------------

std::size_t segment_source::total_memory() {
  if (cap_.total_memory() == 0) {
    device_info info;
    check(*device_->drv, device_->drv->get_device_info(device_->index, &info), "cudaGetDeviceProperties");
    cap_.set_total_memory(info.total_memory);
  }
  return cap_.total_memory();
}

std::size_t segment_source::allowed_bytes() {
  if (!cap_.capping()) return 0;  // no cap: the device's size is not needed
  (void)total_memory();
  return cap_.allowed();
}

// --- growth -----------------------------------------------------------------------------------------

block* segment_source::grow(stream_arena& a, std::size_t rounded, bool small, bool fresh) {
  const std::size_t alloc_size = device_->policy->allocation_size(rounded);
  const segment_provider* provider = a.pool() != nullptr ? a.pool()->options.provider.get() : nullptr;
  // Segments of a provider are whole allocations of its own (Note [Pool options]).
  const bool sleepable = a.pool() != nullptr && a.pool()->options.sleepable;
  // Probes the device at first use; a sleepable pool's segments are VMM whatever the config says.
  const bool expandable = provider == nullptr && (sleepable ? expandable_.available() : expandable_.enabled());
  // The cap is checked against what we hold, without asking the driver (docs/pytorch-compatibility.md §2.3 alloc_block);
  // for expandable growth with get_allocation_size too, whatever gets mapped in the end (§2.13).
  if (cap_.capping() && counters_.reserved() + alloc_size > allowed_bytes()) return nullptr;
  if (expandable) {
    block* b = expandable_.grow(a, rounded, small, fresh);
    // else vmm_reserve said not_supported just now
    if (b != nullptr || (sleepable ? expandable_.available() : expandable_.enabled())) return b;
  }
  return new_segment(a, alloc_size, small);
}

// Note [Releasing the locks around cudaMalloc]
// With release_lock_on_cudamalloc:True, as in PyTorch, the locks are dropped while cudaMalloc runs
// (it can take milliseconds, and much longer when the driver must first free memory), so that other
// threads allocate and free meanwhile: cache hits on the same stream (the arena's lock) and slow
// paths of other streams, empty_cache, stats (the device mutex). What was decided before the call
// stays decided: the segment is obtained even if a block that fits was freed meanwhile, and two
// threads may each pass the per_process_memory_fraction check and together exceed it by one
// segment (PyTorch has the same races). Nothing taken before the call is trusted after it: the
// locks are taken again in their order (device mutex, then the arena's) and the block objects
// reserved again. Only for the default pool's arenas outside a capture: a private pool's arena can
// be recycled once its pool is released, which another thread could do meanwhile.
drv_result segment_source::malloc_maybe_unlocked(stream_arena& a, std::size_t alloc_size, void** ptr) {
  const bool unlock = device_->config->release_lock_on_cudamalloc && device_->device_mutex != nullptr &&
                      a.pool() == nullptr && !device_->capture_underway();
  if (!unlock) return device_->drv->malloc(device_->index, alloc_size, ptr);
  a.mutex().unlock();
  device_->device_mutex->unlock();
  const drv_result result = device_->drv->malloc(device_->index, alloc_size, ptr);
  device_->device_mutex->lock();
  a.mutex().lock();
  if (result.ok()) {
    try {
      a.reserve_blocks();  // other threads may have used the objects reserved before the call
    } catch (...) {
      (void)device_->drv->free(device_->index, *ptr);
      throw;
    }
  }
  return result;
}

block* segment_source::new_segment(stream_arena& a, std::size_t alloc_size, bool small) {
  a.reserve_blocks();
  auto seg = std::make_unique<segment>();
  void* ptr = nullptr;
  // Relaxed mode while a capture is underway so the malloc is legal (Note [Relaxed capture mode]
  // in driver.hpp); if the thread cannot be switched, no cudaMalloc that could break the capture.
  const relaxed_thread_scope relaxed(*device_->drv, device_->capture_underway());
  drv_result result = relaxed.refusal();
  std::shared_ptr<const segment_provider> provider = a.pool() != nullptr ? a.pool()->options.provider : nullptr;
  if (result.ok() && provider != nullptr) {
    ptr = core::allocate_from_provider(*provider, alloc_size, device_->index, a.stream());  // Note [Pool options]
    if (ptr == nullptr) return nullptr;  // out of memory, as the provider says
  } else if (result.ok()) {
    result = malloc_maybe_unlocked(a, alloc_size, &ptr);
  }
  if (result.code == status::out_of_memory) return nullptr;
  if (!result.ok()) {
    throw cuda_error("streampool: cudaMalloc of " + format_size(alloc_size) + " on device " +
                         std::to_string(device_->index) + " failed: " + device_->drv->describe(result),
                     result.native);
  }
  seg->base = reinterpret_cast<std::uintptr_t>(ptr);
  seg->size = alloc_size;
  seg->small = small;
  seg->provider = std::move(provider);
  try {
    segments_->insert(seg->base, alloc_size, &a);
  } catch (...) {
    (void)free_segment_memory(a, *seg);
    throw;
  }
  const std::size_t kind = small ? 1 : 2;
  for (const std::size_t i : {std::size_t{0}, kind}) counters_.segment[i].increase(1);
  counters_.change_reserved(small, static_cast<std::int64_t>(alloc_size));
  ++counters_.num_device_alloc;
  if (device_->policy->is_oversize(alloc_size)) counters_.oversize_segments.increase(1);
  device_->trace.record(trace_action::segment_alloc, device_->index, seg->base, alloc_size, a.stream(), a.pool_id());
  return a.attach_segment(seg.release());
}

// --- release ----------------------------------------------------------------------------------------

drv_result segment_source::free_segment_memory(const stream_arena& a, const segment& seg) {
  if (seg.provider == nullptr) return device_->drv->free(device_->index, reinterpret_cast<void*>(seg.base));
  try {
    seg.provider->deallocate(reinterpret_cast<void*>(seg.base), seg.size, device_->index, a.stream());
  } catch (const std::exception& e) {
    throw error("streampool: segment provider '" + seg.provider->name + "' failed to take back the segment at " +
                core::format_pointer(seg.base) + " (" + format_size(seg.size) + "): " + e.what() +
                "; the segment stays cached (a later empty_cache tries again)");
  }
  return {};
}

void segment_source::release(stream_arena& a, block* b) {
  segment* seg = b->seg;
  // Note [Segment listener] (src/core/trace_ring.cpp): traced before the memory goes, as PyTorch
  // does, so that a listener (NCCL's registration) lets go of it while it still exists.
  device_->trace.record(trace_action::segment_free, device_->index, seg->base, seg->size, a.stream(), a.pool_id());
  const drv_result result = free_segment_memory(a, *seg);
  if (!result.ok()) {
    throw cuda_error("streampool: cudaFree of the segment at " + core::format_pointer(seg->base) + " (" +
                         format_size(seg->size) + ") failed: " + device_->drv->describe(result),
                     result.native);
  }
  a.drop_segment(b);
  segments_->erase(seg->base, seg->size);
  const std::size_t kind = seg->small ? 1 : 2;
  for (const std::size_t i : {std::size_t{0}, kind}) counters_.segment[i].decrease(1);
  counters_.change_reserved(seg->small, -static_cast<std::int64_t>(seg->size));
  ++counters_.num_device_free;
  if (device_->policy->is_oversize(seg->size)) counters_.oversize_segments.decrease(1);
  delete seg;
}

std::size_t segment_source::gc_target() {
  const auto threshold = static_cast<std::size_t>(device_->config->garbage_collection_threshold *
                                                  static_cast<double>(allowed_bytes()));
  const std::size_t reserved = counters_.reserved();
  return reserved > threshold ? reserved - threshold : 0;
}

void segment_source::garbage_collect(const std::vector<std::unique_ptr<stream_arena>>& arenas, std::size_t target) {
  // docs/pytorch-compatibility.md §2.11: frees whole free segments of the default large pools, oldest (by the large-pool
  // search clock) first: each round frees every candidate at least as old as the average.
  struct candidate {
    stream_arena* arena;
    block* b;
    std::uint64_t age;
    bool released;
  };
  std::vector<candidate> candidates;
  const std::uint64_t clock = device_->gc_clock.load(std::memory_order_relaxed);
  for (const auto& a : arenas) {
    if (a->pool() != nullptr) continue;
    a->blocks().large_list().for_each([&](block* b) {
      if (b->whole_segment()) candidates.push_back({a.get(), b, clock - b->gc_count_base, false});
    });
  }
  double total_age = 0;
  for (const candidate& c : candidates) total_age += static_cast<double>(c.age);
  std::size_t remaining = candidates.size();
  std::size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && remaining > 0) {
    const double average = total_age / static_cast<double>(remaining);
    freed = false;
    for (candidate& c : candidates) {
      if (c.released || static_cast<double>(c.age) < average) continue;
      c.released = true;
      freed = true;
      reclaimed += c.b->size;
      total_age -= static_cast<double>(c.age);
      --remaining;
      release(*c.arena, c.b);
    }
  }
}

bool segment_source::release_available(stream_arena& a, std::size_t rounded) {
  // docs/pytorch-compatibility.md §2.10, on the allocation's own arena (same stream, same pool). Oversize blocks are whole
  // segments; a split one (possible with a large large_segment_size) is skipped.
  const std::size_t max_split = device_->policy->max_split_size();
  const std::size_t key = std::max(rounded, max_split);
  std::vector<block*> oversize;  // ascending (size, address)
  a.blocks().large_list().for_each([&](block* b) {
    if (b->size >= max_split && b->whole_segment()) oversize.push_back(b);
  });
  const auto first_fit = std::find_if(oversize.begin(), oversize.end(), [&](block* b) { return b->size >= key; });
  if (first_fit != oversize.end()) {
    release(a, *first_fit);
    return true;
  }
  std::size_t released = 0;
  while (released < key && !oversize.empty()) {
    block* b = oversize.back();
    oversize.pop_back();
    released += b->size;
    release(a, b);
  }
  return released >= key;
}

void segment_source::release_free(stream_arena& a) {
  for (block* b : whole_free_segments(a)) release(a, b);
  expandable_.unmap_free_pages(a);  // every wholly free page (docs/pytorch-compatibility.md §2.13)
}

void segment_source::release_at_exit(stream_arena& a) noexcept {
  for (segment* seg = a.release_at_exit(); seg != nullptr;) {
    segment* next = seg->next;
    if (seg->expandable) {
      expandable_.release_at_exit(*seg);
    } else {
      try {
        (void)free_segment_memory(a, *seg);
      } catch (...) {  // a provider's deallocate threw: status form at teardown, the memory is its
      }
    }
    delete seg;
    seg = next;
  }
}

}  // namespace streampool::native
