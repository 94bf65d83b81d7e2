// device_state.cpp — the arenas of a device (their creation, lookup and recycling are
// device_arenas'), the memory-fraction cap, memory_stats (docs/pytorch-compatibility.md §2.14: the arenas' sums, the device peaks
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
      source_(context_, segments, vmm_warned),
      arenas_(context_) {
  context_.device_mutex = &mutex_;
  if (config.graph_capture_record_stream_reuse) {
    reuse_ = std::make_unique<capture_reuse>(drv);
    context_.reuse.store(reuse_.get(), std::memory_order_relaxed);
  }
  set_fraction(config.per_process_memory_fraction);
}

device_state::~device_state() {
  // Return what the driver still holds for us (live allocations included: the allocator is going
  // away). Status form: a destructor must not throw. Leftover pages first: a reservation can only
  // be freed once nothing is mapped in it.
  source_.release_leftovers();
  for (auto& [pool, rec] : sleeps_) source_.sleeper().release_at_exit(rec);  // held pages, backups
  for (auto& arena : arenas_.all()) source_.release_at_exit(*arena);
}

// --- arenas -----------------------------------------------------------------------------------------

stream_arena& device_state::default_arena(stream_t stream) {
  std::lock_guard lock(mutex_);
  return arenas_.default_arena(stream);
}

void device_state::set_fraction(double fraction) {
  source_.set_fraction(fraction);
  context_.gc_enabled.store(fraction < 1.0 && context_.config->garbage_collection_threshold > 0.0,
                            std::memory_order_relaxed);
}

void device_state::apply_settings_locked(bool fraction_given) {
  source_.set_expandable(context_.config->expandable_segments);
  // graph_capture_record_stream_reuse: made on first use and kept (a free may still hold the
  // pointer it read); off means the frees stop noting markers and allocations stop looking.
  if (context_.config->graph_capture_record_stream_reuse && reuse_ == nullptr) {
    reuse_ = std::make_unique<capture_reuse>(*context_.drv);
  }
  context_.reuse.store(context_.config->graph_capture_record_stream_reuse ? reuse_.get() : nullptr,
                       std::memory_order_release);
  // set_fraction also derives gc_enabled from the (new) garbage_collection_threshold.
  set_fraction(fraction_given ? context_.config->per_process_memory_fraction : fraction());
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
  if (stream_arena* shared = arenas_.shared()) {
    std::lock_guard arena_lock(shared->mutex());
    arenas_.order()->copy_counters(s);
  }
  return s;
}

void device_state::set_front_blocks(bool on) {
  std::lock_guard lock(mutex_);
  auto locks = arenas_.lock_all(nullptr);  // settles every front block
  for (auto& a : arenas_.all()) a->set_front_enabled(on);
}

void device_state::reset_peaks() {
  std::lock_guard lock(mutex_);
  auto locks = arenas_.lock_all(nullptr);
  context_.peaks.reset();
  source_.reset_peaks();
}

void device_state::reset_accumulated() {
  std::lock_guard lock(mutex_);
  auto locks = arenas_.lock_all(nullptr);
  context_.peaks.reset_accumulated();
  source_.reset_accumulated();
  counters_ = device_counters{};
  if (stream_order* order = arenas_.order()) order->reset_counters();
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
  auto locks = arenas_.lock_all(nullptr);
  for (auto& a : arenas_.all()) append_arena_segments(index_, *a, out);
}

}  // namespace streampool::native
