// device_state.cpp — the arenas of a device (creation, recycling, locking them all, their
// events), the memory-fraction cap, memory_stats (docs/pytorch-compatibility.md §2.14: the arenas' sums, the device peaks
// of Note [Device peaks], the segment source's counters) and the segments of a snapshot (spec
// §2.15). Frees parked by a capture are completed in capture_arenas.cpp.
#include "native/device_state.hpp"

#include "native/native_report.hpp"

namespace streampool::native {

device_state::device_state(driver& drv, const allocator_config& config, const size_policy& policy,
                           segment_map& segments, int index, std::atomic<bool>& vmm_warned)
    : index_(index),
      captures_(index),
      context_(drv, index, config, policy, captures_),
      source_(context_, segments, vmm_warned) {
  set_fraction(config.per_process_memory_fraction);
}

device_state::~device_state() {
  // Return what the driver still holds for us (live allocations included: the allocator is going
  // away). Status form: a destructor must not throw. Leftover pages first: a reservation can only
  // be freed once nothing is mapped in it.
  source_.release_leftovers();
  for (auto& arena : arenas_) source_.release_at_exit(*arena);
}

// --- arenas -----------------------------------------------------------------------------------------

stream_arena& device_state::default_arena(stream_t stream) {
  std::lock_guard lock(mutex_);
  return default_arena_locked(stream);
}

stream_arena& device_state::default_arena_locked(stream_t stream) {
  if (stream_arena* a = table_.find(stream)) return *a;
  if (context_.cross_stream) {
    if (stream_arena* shared = shared_arena_locked(stream)) {
      table_.insert(stream, shared);
      return *shared;
    }
  }
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
  arenas_.push_back(std::make_unique<stream_arena>(context_, stream, pool, pool_id));
  return *arenas_.back();
}

stream_arena* device_state::shared_arena_locked(stream_t stream) {
  if (shared_ == nullptr) {
    order_ = std::make_unique<stream_order>(context_);
    shared_ = &new_arena(stream, nullptr, mempool_id{});
    std::lock_guard lock(shared_->mutex());
    shared_->share(order_.get());
  }
  std::lock_guard lock(shared_->mutex());  // hot-path readers look streams up under it
  return order_->add(stream) ? shared_ : nullptr;
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
  if (pending_events() == 0) return;
  for (auto& a : arenas_) {
    std::unique_lock<hybrid_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->has_pending_events()) a->process_events();
  }
}

void device_state::synchronize_all_events(const stream_arena* held) {
  ++counters_.num_sync_all_streams;
  if (pending_events() == 0) return;
  for (auto& a : arenas_) {
    std::unique_lock<hybrid_mutex> lock;
    if (a.get() != held) lock = std::unique_lock(a->mutex());
    if (a->has_pending_events()) a->synchronize_events();
  }
}

void device_state::set_fraction(double fraction) {
  source_.set_fraction(fraction);
  context_.gc_enabled.store(fraction < 1.0 && context_.config->garbage_collection_threshold > 0.0,
                            std::memory_order_relaxed);
}

// --- statistics -------------------------------------------------------------------------------------

memory_stats device_state::stats() {
  std::lock_guard lock(mutex_);
  memory_stats s;
  context_.peaks.collect(s);
  source_.counters().copy_to(s);
  s.num_alloc_retries = counters_.num_alloc_retries;
  s.num_ooms = counters_.num_ooms;
  s.num_sync_all_streams = counters_.num_sync_all_streams;
  s.max_split_size = static_cast<std::int64_t>(context_.policy->max_split_size());
  if (shared_ != nullptr) {
    std::lock_guard arena_lock(shared_->mutex());
    order_->copy_counters(s);
  }
  return s;
}

void device_state::reset_peaks() {
  std::lock_guard lock(mutex_);
  auto locks = lock_arenas(nullptr);
  context_.peaks.reset();
  source_.reset_peaks();
}

void device_state::reset_accumulated() {
  std::lock_guard lock(mutex_);
  auto locks = lock_arenas(nullptr);
  context_.peaks.reset_accumulated();
  source_.reset_accumulated();
  counters_ = device_counters{};
  if (order_ != nullptr) order_->reset_counters();
}

void device_state::append_segments(std::vector<segment_info>& out) {
  std::lock_guard lock(mutex_);
  append_segments_locked(out);
}

void device_state::append_snapshot(memory_snapshot& out) {
  std::lock_guard lock(mutex_);
  append_segments_locked(out.segments);
  source_.append_leftovers(out.leftover_pages);
}

void device_state::append_segments_locked(std::vector<segment_info>& out) {
  // Taken under every arena lock so they agree with stats() (docs/pytorch-compatibility.md §2.14:
  // current values equal sums over the snapshot).
  auto locks = lock_arenas(nullptr);
  for (auto& a : arenas_) append_arena_segments(index_, *a, out);
}

}  // namespace streampool::native
