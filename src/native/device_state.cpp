// device_state.cpp — arenas of a device, segments (the only place that calls driver malloc/free),
// the memory-fraction cap and the device-wide statistics.
#include "native/device_state.hpp"

#include <algorithm>
#include <string>

#include "core/format.hpp"
#include "streampool/errors.hpp"

namespace streampool::native {

device_state::device_state(driver& drv, const allocator_config& config, const size_policy& policy,
                           segment_map& segments, int index, std::atomic<bool>& vmm_warned)
    : driver_(&drv),
      config_(&config),
      policy_(&policy),
      segments_(&segments),
      index_(index),
      events_(drv, index),
      vmm_warned_(&vmm_warned),
      vmm_(config.expandable_segments ? vmm_mode::unknown : vmm_mode::off),
      captures_(index) {
  set_fraction(config.per_process_memory_fraction);
}

device_state::~device_state() {
  // Return what the driver still holds for us (live allocations included: the allocator is going
  // away). Status form: a destructor must not throw. Leftover pages first: a reservation can only
  // be freed once nothing is mapped in it.
  release_leftovers();
  for (auto& arena : arenas_) arena->release_at_exit();
}

// --- arenas -----------------------------------------------------------------------------------------

stream_arena& device_state::default_arena(stream_t stream) {
  std::lock_guard lock(mutex_);
  return default_arena_locked(stream);
}

stream_arena& device_state::default_arena_locked(stream_t stream) {
  if (stream_arena* a = table_.find(stream)) return *a;
  stream_arena& a = new_arena(stream, nullptr, mempool_id{});
  table_.insert(stream, &a);
  return a;
}

stream_arena& device_state::new_arena(stream_t stream, private_pool* pool, mempool_id pool_id) {
  if (!spare_arenas_.empty()) {
    stream_arena* a = spare_arenas_.back();
    spare_arenas_.pop_back();
    std::lock_guard lock(a->mutex());
    a->reassign(stream, pool, pool_id);
    return *a;
  }
  arenas_.reserve(arenas_.size() + 1);
  auto owned = std::make_unique<stream_arena>(*this, stream, pool, pool_id);
  stream_arena* a = owned.get();
  a->next_in_device.store(first_arena_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  first_arena_.store(a, std::memory_order_release);
  arenas_.push_back(std::move(owned));
  return *a;
}

std::vector<std::unique_lock<hybrid_mutex>> device_state::lock_arenas(const stream_arena* held) {
  std::vector<std::unique_lock<hybrid_mutex>> locks;
  locks.reserve(arenas_.size());
  for (auto& a : arenas_) {
    if (a.get() != held) locks.emplace_back(a->mutex());
  }
  return locks;
}

void device_state::process_all_events(const stream_arena* held) {
  if (pending_events.load(std::memory_order_relaxed) == 0) return;
  for (auto& a : arenas_) {
    std::unique_lock<hybrid_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->has_pending_events()) a->process_events();
  }
}

void device_state::synchronize_all_events(const stream_arena* held) {
  ++counters_.num_sync_all_streams;
  if (pending_events.load(std::memory_order_relaxed) == 0) return;
  for (auto& a : arenas_) {
    std::unique_lock<hybrid_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->has_pending_events()) a->synchronize_events();
  }
}

// --- segments ---------------------------------------------------------------------------------------

std::size_t device_state::total_memory() {
  if (total_memory_ == 0) {
    device_info info;
    check(*driver_, driver_->get_device_info(index_, &info), "cudaGetDeviceProperties");
    total_memory_ = info.total_memory;
  }
  return total_memory_;
}

std::size_t device_state::allowed_bytes() {
  const double f = fraction();
  if (f >= 1.0) return 0;  // no cap
  return static_cast<std::size_t>(f * static_cast<double>(total_memory()));
}

void device_state::set_fraction(double fraction) {
  fraction_.store(fraction, std::memory_order_relaxed);
  gc_enabled_.store(fraction < 1.0 && config_->garbage_collection_threshold > 0.0, std::memory_order_relaxed);
}

block* device_state::new_segment(stream_arena& a, std::size_t alloc_size, bool small) {
  // The cap is checked against what we hold, without asking the driver (docs/pytorch-compatibility.md §2.3 alloc_block).
  const std::size_t allowed = allowed_bytes();
  const auto reserved = static_cast<std::size_t>(counters_.reserved_bytes[0].current);
  if (fraction() < 1.0 && reserved + alloc_size > allowed) return nullptr;
  a.reserve_blocks();
  auto seg = std::make_unique<segment>();
  void* ptr = nullptr;
  // Relaxed mode while a capture is underway so the malloc is legal (Note [Relaxed capture mode]
  // in driver.hpp); if the thread cannot be switched, no cudaMalloc that could break the capture.
  const relaxed_thread_scope relaxed(*driver_, capture_underway());
  drv_result result = relaxed.refusal();
  if (result.ok()) result = driver_->malloc(index_, alloc_size, &ptr);
  if (result.code == status::out_of_memory) return nullptr;
  if (!result.ok()) {
    throw cuda_error("streampool: cudaMalloc of " + format_size(alloc_size) + " on device " + std::to_string(index_) +
                         " failed: " + driver_->describe(result),
                     result.native);
  }
  seg->base = reinterpret_cast<std::uintptr_t>(ptr);
  seg->size = alloc_size;
  seg->small = small;
  try {
    segments_->insert(seg->base, alloc_size, &a);
  } catch (...) {
    (void)driver_->free(index_, ptr);
    throw;
  }
  const std::size_t kind = seg->small ? 1 : 2;
  for (const std::size_t i : {std::size_t{0}, kind}) {
    counters_.segment[i].increase(1);
    counters_.reserved_bytes[i].increase(static_cast<std::int64_t>(alloc_size));
  }
  ++counters_.num_device_alloc;
  if (policy_->is_oversize(alloc_size)) counters_.oversize_segments.increase(1);
  trace_.record(trace_action::segment_alloc, index_, seg->base, alloc_size, a.stream(), a.pool_id());
  return a.attach_segment(seg.release());
}

void device_state::release_block(stream_arena& a, block* b) {
  segment* seg = b->seg;
  a.detach_segment(b);
  const drv_result result = driver_->free(index_, reinterpret_cast<void*>(seg->base));
  if (!result.ok()) {
    a.reattach_segment(b);
    throw cuda_error("streampool: cudaFree of the segment at " + detail::format_pointer(seg->base) + " (" +
                         format_size(seg->size) + ") failed: " + driver_->describe(result),
                     result.native);
  }
  segments_->erase(seg->base, seg->size);
  const std::size_t kind = seg->small ? 1 : 2;
  for (const std::size_t i : {std::size_t{0}, kind}) {
    counters_.segment[i].decrease(1);
    counters_.reserved_bytes[i].decrease(static_cast<std::int64_t>(seg->size));
  }
  ++counters_.num_device_free;
  if (policy_->is_oversize(seg->size)) counters_.oversize_segments.decrease(1);
  trace_.record(trace_action::segment_free, index_, seg->base, seg->size, a.stream(), a.pool_id());
  a.drop_block(b);
  delete seg;
}

}  // namespace streampool::native
