// native_stats.cpp — memory_stats of a device (docs/pytorch-compatibility.md §2.14): the per-arena statistics summed, the
// device peaks of Note [Device peaks], and the device-wide segment/reserved counters.
#include "native/device_state.hpp"

namespace streampool::native {
namespace {

std::int64_t current_sum(const device_state& d, std::size_t index) noexcept {
  std::int64_t sum = 0;
  d.for_each_arena([&](const stream_arena& a) { sum += a.current(index); });
  return sum;
}

void raise_to(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

stat_array& array_of(memory_stats& s, arena_stat_kind kind) noexcept {
  switch (kind) {
    case arena_stat_kind::allocation: return s.allocation;
    case arena_stat_kind::active: return s.active;
    case arena_stat_kind::inactive_split: return s.inactive_split;
    case arena_stat_kind::allocated_bytes: return s.allocated_bytes;
    case arena_stat_kind::active_bytes: return s.active_bytes;
    case arena_stat_kind::inactive_split_bytes: return s.inactive_split_bytes;
    case arena_stat_kind::requested_bytes: return s.requested_bytes;
  }
  return s.allocation;
}

stat& stat_of(memory_stats& s, std::size_t index) noexcept {
  if (index == oversize_allocations_index) return s.oversize_allocations;
  return array_of(s, static_cast<arena_stat_kind>(index / stat_pool_count))[index % stat_pool_count];
}

}  // namespace

void stream_arena::add_stats_to(memory_stats& out) const noexcept {
  for (std::size_t k = 0; k < arena_stat_kinds; ++k) {
    const auto kind = static_cast<arena_stat_kind>(k);
    stat_array& array = array_of(out, kind);
    for (std::size_t pool = 0; pool < 2; ++pool) {
      if (kind == arena_stat_kind::active || kind == arena_stat_kind::active_bytes) {
        // Derived: allocation (or its bytes) + pending (Note [Derived active counters]).
        const arena_counter& base = counters_[static_cast<std::size_t>(
            kind == arena_stat_kind::active ? arena_stat_kind::allocation : arena_stat_kind::allocated_bytes)][pool];
        const arena_counter& pending = counters_[k][pool];
        const std::int64_t base_now = base.now();
        const std::int64_t base_freed = base.freed.load(std::memory_order_relaxed);
        const std::int64_t pending_now = pending.now();
        const std::int64_t current = base_now + pending_now;
        const std::int64_t freed = base_freed - pending_now + pending.offset.load(std::memory_order_relaxed);
        const std::int64_t allocated = base_now + base_freed - base.offset.load(std::memory_order_relaxed);
        for (stat* s : {&array[pool + 1], &array[0]}) {
          s->current += current;
          s->freed += freed;
          s->allocated += allocated;
        }
        continue;
      }
      counters_[k][pool].add_to(array[pool + 1]);
      counters_[k][pool].add_to(array[0]);
    }
  }
  oversize_.add_to(out.oversize_allocations);
}

void device_state::raise_peak(std::size_t index) noexcept { raise_to(peaks_[index], current_sum(*this, index)); }

memory_stats device_state::stats() {
  std::lock_guard lock(mutex_);
  memory_stats s;
  for_each_arena([&](const stream_arena& a) { a.add_stats_to(s); });
  for (std::size_t i = 0; i < arena_stat_count; ++i) {
    stat& out = stat_of(s, i);
    raise_to(peaks_[i], out.current);
    out.peak = peaks_[i].load(std::memory_order_relaxed);
  }
  s.segment = counters_.segment;
  s.reserved_bytes = counters_.reserved_bytes;
  s.oversize_segments = counters_.oversize_segments;
  s.num_alloc_retries = counters_.num_alloc_retries;
  s.num_ooms = counters_.num_ooms;
  s.num_sync_all_streams = counters_.num_sync_all_streams;
  s.num_device_alloc = counters_.num_device_alloc;
  s.num_device_free = counters_.num_device_free;
  s.max_split_size = static_cast<std::int64_t>(policy_->max_split_size());
  return s;
}

void device_state::reset_peaks() {
  std::lock_guard lock(mutex_);
  auto locks = lock_arenas(nullptr);
  for (auto& a : arenas_) a->reset_peaks();
  for (std::size_t i = 0; i < arena_stat_count; ++i) {
    peaks_[i].store(current_sum(*this, i), std::memory_order_relaxed);
  }
  for (stat* s : {&counters_.segment[0], &counters_.segment[1], &counters_.segment[2], &counters_.reserved_bytes[0],
                  &counters_.reserved_bytes[1], &counters_.reserved_bytes[2], &counters_.oversize_segments}) {
    s->reset_peak();
  }
}

void device_state::reset_accumulated() {
  std::lock_guard lock(mutex_);
  auto locks = lock_arenas(nullptr);
  for (auto& a : arenas_) a->reset_accumulated();
  for (stat* s : {&counters_.segment[0], &counters_.segment[1], &counters_.segment[2], &counters_.reserved_bytes[0],
                  &counters_.reserved_bytes[1], &counters_.reserved_bytes[2], &counters_.oversize_segments}) {
    s->reset_accumulated();
  }
  counters_.num_alloc_retries = counters_.num_ooms = counters_.num_sync_all_streams = 0;
  counters_.num_device_alloc = counters_.num_device_free = 0;
}

}  // namespace streampool::native
