// arena_stats.cpp — reading the hot statistics of an arena (derived active counters, sums for
// memory_stats, resets) and the device-wide peaks over every arena (Note [Device peaks], Note
// [Device totals]). The updates themselves are inline in arena_stats.hpp: they are on the hot path.
#include "native/arena_stats.hpp"

#include <mutex>

namespace streampool::native {
namespace {

/// The counter that active (or active_bytes) is derived from (Note [Derived active counters]).
constexpr arena_stat_kind base_of(arena_stat_kind kind) noexcept {
  return kind == arena_stat_kind::active ? arena_stat_kind::allocation : arena_stat_kind::allocated_bytes;
}
constexpr bool is_derived(arena_stat_kind kind) noexcept {
  return kind == arena_stat_kind::active || kind == arena_stat_kind::active_bytes;
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

// --- arena_counters ---------------------------------------------------------------------------------

std::int64_t arena_counters::active_now(arena_stat_kind kind, std::size_t pool) const noexcept {
  return counters_[static_cast<std::size_t>(base_of(kind))][pool].now() +
         counters_[static_cast<std::size_t>(kind)][pool].now();
}

void arena_counters::raise_active_peaks() noexcept {
  for (const arena_stat_kind kind : {arena_stat_kind::active, arena_stat_kind::active_bytes}) {
    auto& pair = counters_[static_cast<std::size_t>(kind)];
    const std::int64_t small = active_now(kind, 0);
    const std::int64_t large = active_now(kind, 1);
    if (small > pair[0].peak) {
      pair[0].peak = small;
      raise_device_peak(stat_index(kind, stat_pool::small_pool));
    }
    if (large > pair[1].peak) {
      pair[1].peak = large;
      raise_device_peak(stat_index(kind, stat_pool::large_pool));
    }
    if (small + large > all_peak_[static_cast<std::size_t>(kind)]) {
      all_peak_[static_cast<std::size_t>(kind)] = small + large;
      raise_device_peak(stat_index(kind, stat_pool::all));
    }
  }
}

std::int64_t arena_counters::current(std::size_t index) const noexcept {
  if (index == oversize_allocations_index) return oversize_.now();
  const auto kind = static_cast<arena_stat_kind>(index / stat_pool_count);
  const auto value = [&](std::size_t pool) {
    return is_derived(kind) ? active_now(kind, pool) : counters_[static_cast<std::size_t>(kind)][pool].now();
  };
  switch (static_cast<stat_pool>(index % stat_pool_count)) {
    case stat_pool::small_pool: return value(0);
    case stat_pool::large_pool: return value(1);
    case stat_pool::all: break;
  }
  return value(0) + value(1);
}

void arena_counters::add_to(memory_stats& out) const noexcept {
  for (std::size_t k = 0; k < arena_stat_kinds; ++k) {
    const auto kind = static_cast<arena_stat_kind>(k);
    stat_array& array = array_of(out, kind);
    for (std::size_t pool = 0; pool < 2; ++pool) {
      if (is_derived(kind)) {
        // allocation (or its bytes) + pending (Note [Derived active counters]).
        const arena_counter& base = counters_[static_cast<std::size_t>(base_of(kind))][pool];
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

void arena_counters::reset_peaks() noexcept {
  for (std::size_t k = 0; k < arena_stat_kinds; ++k) {
    const auto kind = static_cast<arena_stat_kind>(k);
    for (std::size_t pool = 0; pool < 2; ++pool) {
      counters_[k][pool].peak = is_derived(kind) ? active_now(kind, pool) : counters_[k][pool].now();
    }
    all_peak_[k] = counters_[k][0].peak + counters_[k][1].peak;
  }
  oversize_.peak = oversize_.now();
}

void arena_counters::reset_accumulated() noexcept {
  for (auto& kind : counters_) {
    kind[0].reset_accumulated();
    kind[1].reset_accumulated();
  }
  oversize_.reset_accumulated();
}

// --- device_peaks -----------------------------------------------------------------------------------

void device_peaks::link(arena_counters& c) noexcept {
  c.next.store(first_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  first_.store(&c, std::memory_order_release);
}

std::int64_t device_peaks::current_sum(std::size_t index) const noexcept {
  std::int64_t sum = 0;
  for (const arena_counters* c = first_.load(std::memory_order_acquire); c != nullptr;
       c = c->next.load(std::memory_order_acquire)) {
    sum += c->current(index);
  }
  return sum;
}

void arena_counters::relist() noexcept {
  slow_ &= ~unlisted;
  peaks_->note_changed(*this);
}

void arena_counters::after_allocation_slow() noexcept {
  if (has_pending()) raise_active_peaks();  // Note [Derived active counters]
  changed();
}

// Only the arena's call (relist) or a rise that popped it pushes it: it is on the list at most once.
void device_peaks::note_changed(arena_counters& c) noexcept {
  arena_counters* head = changed_.load(std::memory_order_relaxed);
  do {
    c.next_changed = head;
  } while (!changed_.compare_exchange_weak(head, &c, std::memory_order_release, std::memory_order_relaxed));
}

void device_peaks::read_locked(arena_counters& c) noexcept {
  for (std::size_t i = 0; i < arena_stat_count; ++i) {
    const std::int64_t now = c.current(i);
    totals_[i] += now - c.published[i];
    c.published[i] = now;
  }
  arena_reads_.store(arena_reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Note [Device totals]: the rising arena and the arenas changed since the last rise are read.
void device_peaks::raise(arena_counters& rising, std::size_t index) noexcept {
  std::int64_t total = 0;
  {
    const std::lock_guard guard(lock_);
    read_locked(rising);
    arena_counters* c = changed_.exchange(nullptr, std::memory_order_acquire);
    while (c != nullptr) {
      arena_counters* const next = c->next_changed;  // before a push may rewrite it
      if (c == &rising) {
        note_changed(*c);  // read above; its call may change it further
      } else if (c->owner_lock_->try_lock()) {
        read_locked(*c);
        c->slow_ |= arena_counters::unlisted;  // off the list; its next change puts it back
        c->owner_lock_->unlock();
      } else {
        read_locked(*c);   // busy on another thread: read as it stands ...
        note_changed(*c);  // ... and read again at the next rise
      }
      c = next;
    }
    total = totals_[index];
  }
  raise_to(peaks_[index], total);
}

void device_peaks::collect(memory_stats& out) noexcept {
  for (const arena_counters* c = first_.load(std::memory_order_acquire); c != nullptr;
       c = c->next.load(std::memory_order_acquire)) {
    c->add_to(out);
  }
  for (std::size_t i = 0; i < arena_stat_count; ++i) {
    stat& s = stat_of(out, i);
    raise_to(peaks_[i], s.current);
    s.peak = peaks_[i].load(std::memory_order_relaxed);
  }
}

void device_peaks::reset() noexcept {
  for (arena_counters* c = first_.load(std::memory_order_acquire); c != nullptr;
       c = c->next.load(std::memory_order_acquire)) {
    c->reset_peaks();
  }
  for (std::size_t i = 0; i < arena_stat_count; ++i) peaks_[i].store(current_sum(i), std::memory_order_relaxed);
}

void device_peaks::reset_accumulated() noexcept {
  for (arena_counters* c = first_.load(std::memory_order_acquire); c != nullptr;
       c = c->next.load(std::memory_order_acquire)) {
    c->reset_accumulated();
  }
}

}  // namespace streampool::native
