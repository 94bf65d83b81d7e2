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

std::int64_t counters_view::current(std::size_t index) const noexcept {
  if (index == oversize_allocations_index) return oversize.current;
  const auto kind = static_cast<arena_stat_kind>(index / stat_pool_count);
  const auto value = [&](std::size_t pool) {
    const std::int64_t own = c[static_cast<std::size_t>(kind)][pool].current;
    return is_derived(kind) ? c[static_cast<std::size_t>(base_of(kind))][pool].current + own : own;
  };
  switch (static_cast<stat_pool>(index % stat_pool_count)) {
    case stat_pool::small_pool: return value(0);
    case stat_pool::large_pool: return value(1);
    case stat_pool::all: break;
  }
  return value(0) + value(1);
}

namespace {

counter_values load(const arena_counter& c) noexcept {
  return {c.current.load(std::memory_order_acquire), c.freed.load(std::memory_order_acquire),
          c.offset.load(std::memory_order_acquire)};
}

/// The free of a parked block (`parked` 0 or 1) and `pairs` completed pairs on one counter:
/// `delta` is what the free adds to current (Note [Front block counters]).
void apply(counter_values& v, std::int64_t parked, std::int64_t pairs, std::int64_t delta) noexcept {
  v.current += parked * delta;
  v.freed += parked * (delta < 0 ? -delta : 0) + pairs * (delta < 0 ? -delta : delta);
}

}  // namespace

counters_view arena_counters::read() const noexcept {
  counters_view v;
  for (;;) {
    const std::uint64_t seq = share_.seq.load(std::memory_order_acquire);
    if ((seq & 1) != 0) continue;  // a take-back or a fold is being written
    for (std::size_t k = 0; k < arena_stat_kinds; ++k) {
      v.c[k][0] = load(counters_[k][0]);
      v.c[k][1] = load(counters_[k][1]);
    }
    v.oversize = load(oversize_);
    const std::uint64_t state = share_.state.load(std::memory_order_acquire);  // after the counters
    if (state != 0) {
      const auto parked = static_cast<std::int64_t>(state & front_share::parked_bit);
      const auto pairs = static_cast<std::int64_t>(state >> 1);
      const std::size_t pool = share_.small.load(std::memory_order_acquire) ? 0 : 1;
      const std::int64_t size = share_.size.load(std::memory_order_acquire);
      const auto at = [&](arena_stat_kind kind) -> counter_values& { return v.c[static_cast<std::size_t>(kind)][pool]; };
      apply(at(arena_stat_kind::allocation), parked, pairs, -1);
      apply(at(arena_stat_kind::allocated_bytes), parked, pairs, -size);
      apply(at(arena_stat_kind::inactive_split), parked, pairs, share_.split.load(std::memory_order_acquire));
      apply(at(arena_stat_kind::inactive_split_bytes), parked, pairs,
            share_.split_bytes.load(std::memory_order_acquire));
      // requested: the parked free only (a take-back changes the counter itself)
      apply(at(arena_stat_kind::requested_bytes), parked, 0, -share_.requested.load(std::memory_order_acquire));
    }
    if (share_.seq.load(std::memory_order_acquire) == seq) return v;
  }
}

void arena_counters::fold_share() noexcept {
  const std::uint64_t state = share_.now();
  if (state == 0) return;
  const auto parked = static_cast<std::int64_t>(state & front_share::parked_bit);
  const auto pairs = static_cast<std::int64_t>(state >> 1);
  const std::size_t pool = share_.small.load(std::memory_order_relaxed) ? 0 : 1;
  const std::int64_t size = share_.size.load(std::memory_order_relaxed);
  share_.begin_write();
  const auto fold = [&](arena_stat_kind kind, std::int64_t p, std::int64_t n, std::int64_t delta) {
    arena_counter& c = counters_[static_cast<std::size_t>(kind)][pool];
    counter_values v{c.now(), c.freed.load(std::memory_order_relaxed), 0};
    apply(v, p, n, delta);
    c.current.store(v.current, std::memory_order_release);
    c.freed.store(v.freed, std::memory_order_release);
  };
  fold(arena_stat_kind::allocation, parked, pairs, -1);
  fold(arena_stat_kind::allocated_bytes, parked, pairs, -size);
  fold(arena_stat_kind::inactive_split, parked, pairs, share_.split.load(std::memory_order_relaxed));
  fold(arena_stat_kind::inactive_split_bytes, parked, pairs, share_.split_bytes.load(std::memory_order_relaxed));
  fold(arena_stat_kind::requested_bytes, parked, 0, -share_.requested.load(std::memory_order_relaxed));
  share_.state.store(0, std::memory_order_release);
  share_.end_write();
}

void arena_counters::add_to(memory_stats& out) const noexcept {
  const counters_view view = read();
  for (std::size_t k = 0; k < arena_stat_kinds; ++k) {
    const auto kind = static_cast<arena_stat_kind>(k);
    stat_array& array = array_of(out, kind);
    for (std::size_t pool = 0; pool < 2; ++pool) {
      const counter_values& own = view.c[k][pool];
      std::int64_t current = own.current;
      std::int64_t freed = own.freed;
      std::int64_t allocated = own.current + own.freed - own.offset;
      if (is_derived(kind)) {
        // allocation (or its bytes) + pending (Note [Derived active counters]).
        const counter_values& base = view.c[static_cast<std::size_t>(base_of(kind))][pool];
        current = base.current + own.current;
        freed = base.freed - own.current + own.offset;
        allocated = base.current + base.freed - base.offset;
      }
      for (stat* s : {&array[pool + 1], &array[0]}) {
        s->current += current;
        s->freed += freed;
        s->allocated += allocated;
      }
    }
  }
  const counter_values& o = view.oversize;
  out.oversize_allocations.current += o.current;
  out.oversize_allocations.freed += o.freed;
  out.oversize_allocations.allocated += o.current + o.freed - o.offset;
}

// Resets run under every arena lock, whose settle folded the share (Note [Front block counters]).
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
  const counters_view view = c.read();
  for (std::size_t i = 0; i < arena_stat_count; ++i) {
    const std::int64_t now = view.current(i);
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
