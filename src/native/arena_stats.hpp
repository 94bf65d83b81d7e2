// arena_stats.hpp — the hot-path statistics of one stream arena (docs/pytorch-compatibility.md §2.14: allocation, active,
// inactive_split, allocated/active/inactive_split/requested bytes, oversize_allocations), kept per
// pool kind (small/large); "all" is their sum, except its peak, which the arena tracks too. Written
// only by the holder of the arena lock, read by stats() of any thread (relaxed atomics: plain loads
// and stores on x86). Also the device-wide peaks over every arena of a device (Note [Device peaks])
// and the device-wide currents they are raised to (Note [Device totals]).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/hybrid_mutex.hpp"
#include "native/front_share.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

enum class arena_stat_kind : std::uint8_t {
  allocation, active, inactive_split, allocated_bytes, active_bytes, inactive_split_bytes, requested_bytes
};
inline constexpr std::size_t arena_stat_kinds = 7;
/// Index of a device peak: kind * 3 + stat_pool, and oversize_allocations last.
inline constexpr std::size_t oversize_allocations_index = arena_stat_kinds * stat_pool_count;
inline constexpr std::size_t arena_stat_count = oversize_allocations_index + 1;

[[nodiscard]] constexpr std::size_t stat_index(arena_stat_kind kind, stat_pool pool) noexcept {
  return static_cast<std::size_t>(kind) * stat_pool_count + static_cast<std::size_t>(pool);
}

/// One counter of one arena. Only `current` and `freed` change on the hot path: `allocated` is
/// derived (current + freed - offset), `offset` absorbs reset_accumulated.
struct arena_counter {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> freed{0};
  std::atomic<std::int64_t> offset{0};
  std::int64_t peak = 0;  ///< this arena's own high-water mark (arena lock)

  [[nodiscard]] std::int64_t now() const noexcept { return current.load(std::memory_order_relaxed); }
  /// Adds current, allocated and freed (not the peak) into `out`.
  void add_to(stat& out) const noexcept {
    const std::int64_t c = now();
    const std::int64_t f = freed.load(std::memory_order_relaxed);
    out.current += c;
    out.freed += f;
    out.allocated += c + f - offset.load(std::memory_order_relaxed);
  }
  void reset_accumulated() noexcept {
    offset.store(now(), std::memory_order_relaxed);
    freed.store(0, std::memory_order_relaxed);
  }
};

/// What a reader sees of one counter (Note [Front block counters]).
struct counter_values {
  std::int64_t current = 0;
  std::int64_t freed = 0;
  std::int64_t offset = 0;
};
/// What a reader sees of one arena's counters, the front block's share applied (arena_counters::read).
struct counters_view {
  std::array<std::array<counter_values, 2>, arena_stat_kinds> c{};  // [kind][small, large]
  counter_values oversize;
  /// Current value of device-peak index `index` (active derived).
  [[nodiscard]] std::int64_t current(std::size_t index) const noexcept;
};

class arena_counters;

// Note [Device peaks]
// current/allocated/freed of the per-arena statistics are summed exactly by stats(). A device-wide
// peak is the maximum over time of a sum over arenas, which cannot be maintained exactly without
// a shared counter written on every call (the very contention arenas avoid). Rule: whenever an
// arena's own current exceeds its own high-water mark, the device peak is raised to the sum of
// all arenas' currents at that moment; stats() also raises it to the current sum. Consequences:
// with one arena active since the last reset (one stream, no capture) peaks are exact; with
// several, a device peak is missed only when the streams' sums exceed it while
// each stream stays below its own earlier high-water mark — the reported peak is then a lower
// bound. (While streams are busy, one stats() call may add up per-stream values read a few
// nanoseconds apart, like any unlocked read of sharded counters.) The segment/reserved
// statistics are device-wide and exact (segment_source). How the sum is found: Note [Device totals].

// Note [Device totals]
// The sum of every arena's currents used to be added up at each rise of an arena's own peak,
// reading every arena: a rise is rare in a steady state, but each new stream's first blocks raise
// its arena's peaks, so a trace with 20,000 streams read 20,000 arenas per event and did not
// finish a replay in 600 s (quadratic). Now the device keeps the sum, `totals_`, as the sum of
// what it last read of each arena (`published_`), and an arena whose counters changed since is on
// a list of changed arenas: a rise reads the rising arena and the listed ones, then takes the
// total, so it costs the arenas that changed since the last rise, not all of them. The hot path
// adds no shared write and no instruction: in each call that changes its counters the arena
// checks its own `unlisted` bit and joins the list (a lock-free push) only when it was off it.
// A rise takes an arena off the list (sets the bit) only when it can take the arena's lock
// (try_lock) and reads it under it; an arena whose lock is held (the rising one, or one another
// thread is changing) is read as it stands and stays listed. So a call may join anywhere in it:
// nobody takes the arena off the list while the call holds its lock. The bit shares a word with
// the checks a call made already: an allocation's "frees pending" (Note [Derived active
// counters]) and a free's "cross-stream order" (Note [Cross-stream reuse]), so each checks one
// word, as before.
// With one thread the total at a rise is exactly the old sum (every arena is either listed or
// unchanged since it was read, and the rising one is read in any case), so the peaks are the
// same values as before. With several threads a rise reads an arena another thread is changing
// as it stands, as the old unlocked reads did, and that arena stays listed; Σ published =
// totals_ holds at all times (both change only under `lock_`), so nothing drifts. The rest
// (collect, reset) still reads every arena: they are not per event.

/// The device-wide peaks of the arena statistics, over a lock-free list of every arena's
/// counters of the device (linked under the device mutex, never unlinked: arenas live as long as
/// the device), and the device-wide currents (Note [Device totals]).
class device_peaks {
 public:
  /// Adds `c` to the list (device mutex held).
  void link(arena_counters& c) noexcept;
  /// Raises peak `index` to the current sum over every arena; `rising` is the arena whose own
  /// peak rose (its lock held). Any thread.
  void raise(arena_counters& rising, std::size_t index) noexcept;
  /// Puts `c`, just taken off `unlisted`, on the list of changed arenas (its lock held; Note
  /// [Device totals]).
  void note_changed(arena_counters& c) noexcept;
  /// Arenas read by rises so far (a test's measure of the work; Note [Device totals]).
  [[nodiscard]] std::uint64_t arena_reads() const noexcept { return arena_reads_.load(std::memory_order_relaxed); }
  /// Adds every arena's current/allocated/freed into `out` and sets the peaks (device mutex).
  void collect(memory_stats& out) noexcept;
  /// Every arena's own peaks and the device peaks restart from the current values (device mutex
  /// and every arena lock held).
  void reset() noexcept;
  /// Every arena's accumulated counters restart from zero (device mutex and every arena lock).
  void reset_accumulated() noexcept;

 private:
  [[nodiscard]] std::int64_t current_sum(std::size_t index) const noexcept;
  /// Brings totals_ up to date with `c`'s currents (lock_ held).
  void read_locked(arena_counters& c) noexcept;

  std::array<std::atomic<std::int64_t>, arena_stat_count> peaks_{};
  std::atomic<arena_counters*> first_{nullptr};
  std::atomic<arena_counters*> changed_{nullptr};  ///< arenas changed since their last read
  core::hybrid_mutex lock_;                        ///< totals_ and every arena's published_
  std::array<std::int64_t, arena_stat_count> totals_{};
  std::atomic<std::uint64_t> arena_reads_{0};
};

// Note [Derived active counters]
// A block is active from its allocation until its free completes; in between it may wait for
// the events of record_stream uses or for a capture to end ("pending"). So active = allocation +
// pending, and active_bytes = allocated_bytes + pending bytes. The hot path therefore updates
// only allocation and allocated_bytes; the counters_ slots of active and active_bytes hold the
// pending block count and bytes (changed only when a free starts or ends waiting, which is not
// a cache hit), while their `peak` fields are active's own peaks. Readers derive (current(),
// add_to, reset_peaks): current = base + pending; allocated (accumulated) = allocation's,
// since every allocation makes one block active; freed = base.freed - pending + pending at the
// last reset_accumulated (the pending slot's offset). Peaks: active rises only when an
// allocation rises; with nothing pending active equals allocation and its peak is at least
// allocation's, so it can only pass its peak where allocation passes its own (add calls
// raise_active_peaks there); with something pending (has_pending()) every allocation
// checks. A cache-hit pair makes four counter updates fewer than when active was kept apart.

// Note [Hot statistics]
// A cache-hit pair changes up to ten counters (allocation and its bytes, requested bytes,
// inactive_split when a block is split or merged; active is derived, Note [Derived active
// counters]). Each change is written out for its
// sign: an increase checks this arena's peak of the pool kind and of "all" (Note [Device peaks]),
// a decrease only adds to `freed`. The arena is the only writer, so the counters are read back
// with plain (relaxed) loads; add and sub below are what the hot path inlines.

/// The hot statistics of one arena (arena lock held for every change).
class arena_counters {
 public:
  /// Counters whose peaks raise those of `peaks`; the owner links them into its list once it is
  /// fully built (device_peaks::link).
  /// `owner_lock`: the arena lock, held for every change (device_peaks reads an arena it can lock
  /// exactly, Note [Device totals]).
  arena_counters(device_peaks& peaks, core::hybrid_mutex& owner_lock) noexcept
      : peaks_(&peaks), owner_lock_(&owner_lock) {}
  arena_counters(const arena_counters&) = delete;
  arena_counters& operator=(const arena_counters&) = delete;

  /// +amount (>= 0) on (kind, pool kind); "all" is implied. Not for active / active_bytes, which
  /// are derived (Note [Derived active counters]).
  void add(arena_stat_kind kind, bool small, std::int64_t amount) noexcept {
    const auto k = static_cast<std::size_t>(kind);
    auto& pair = counters_[k];
    arena_counter& c = pair[small ? 0 : 1];
    const std::int64_t now = c.now() + amount;
    c.current.store(now, std::memory_order_relaxed);
    // Active = allocation + pending can only pass its peak where allocation passes its own.
    const bool drives_active = kind == arena_stat_kind::allocation || kind == arena_stat_kind::allocated_bytes;
    if (now > c.peak) [[unlikely]] {
      c.peak = now;
      raise_device_peak(stat_index(kind, small ? stat_pool::small_pool : stat_pool::large_pool));
      if (drives_active) raise_active_peaks();
    }
    const std::int64_t all = pair[0].now() + pair[1].now();
    if (all > all_peak_[k]) [[unlikely]] {
      all_peak_[k] = all;
      raise_device_peak(stat_index(kind, stat_pool::all));
      if (drives_active) raise_active_peaks();
    }
  }
  /// -amount (amount >= 0) on (kind, pool kind).
  void sub(arena_stat_kind kind, bool small, std::int64_t amount) noexcept {
    arena_counter& c = counters_[static_cast<std::size_t>(kind)][small ? 0 : 1];
    c.current.store(c.now() - amount, std::memory_order_relaxed);
    c.freed.store(c.freed.load(std::memory_order_relaxed) + amount, std::memory_order_relaxed);
  }
  /// +amount or -amount on (kind, pool kind of the block).
  void change(arena_stat_kind kind, bool small, std::int64_t amount) noexcept {
    if (amount < 0) sub(kind, small, -amount);
    else add(kind, small, amount);
  }
  /// A freed block starts (+1, +bytes) or ends (-1, -bytes) waiting for its events or its capture.
  /// Active is unchanged by the start (allocation falls by as much), so no peak can move.
  void change_pending(bool small, std::int64_t blocks, std::int64_t bytes) noexcept {
    arena_counter& n = counters_[static_cast<std::size_t>(arena_stat_kind::active)][small ? 0 : 1];
    arena_counter& b = counters_[static_cast<std::size_t>(arena_stat_kind::active_bytes)][small ? 0 : 1];
    n.current.store(n.now() + blocks, std::memory_order_relaxed);
    b.current.store(b.now() + bytes, std::memory_order_relaxed);
    slow_ += static_cast<std::uint64_t>(blocks) * pending_unit;
    changed();
  }
  void change_oversize(std::int64_t amount) noexcept {
    const std::int64_t now = oversize_.now() + amount;
    oversize_.current.store(now, std::memory_order_relaxed);
    if (amount < 0) {
      oversize_.freed.store(oversize_.freed.load(std::memory_order_relaxed) - amount, std::memory_order_relaxed);
    } else if (now > oversize_.peak) {
      oversize_.peak = now;
      raise_device_peak(oversize_allocations_index);
    }
    changed();
  }
  /// Puts the arena on the device's list of changed arenas unless it is on it (Note [Device
  /// totals]): once in every call that changes a counter, anywhere in it (arena lock held). add /
  /// sub / change do not call it, to keep it to one check per call; change_pending and
  /// change_oversize do, an allocation calls after_allocation and a free checks free_flags.
  void changed() noexcept {
    if ((slow_ & unlisted) != 0) [[unlikely]] relist();
  }
  /// An allocation's one check for its two rare cases: frees pending (active may pass its peak,
  /// Note [Derived active counters]) and the arena off the list of changed arenas.
  void after_allocation() noexcept {
    if ((slow_ & ~(ordered | no_front)) != 0) [[unlikely]] after_allocation_slow();
  }
  /// A free's one check (the one it made for a cross-stream order before): nonzero when the
  /// arena has a cross-stream order (set_ordered), is off the list of changed arenas, or parks no
  /// front block (set_no_front).
  [[nodiscard]] std::uint64_t free_flags() const noexcept { return slow_ & (unlisted | ordered | no_front); }
  /// The arena has a cross-stream order (Note [Cross-stream reuse]): its frees take the slow check.
  void set_ordered(bool on) noexcept { slow_ = on ? (slow_ | ordered) : (slow_ & ~ordered); }
  /// The arena's frees park no front block (Note [Front block] in front_block.hpp).
  void set_no_front(bool on) noexcept { slow_ = on ? (slow_ | no_front) : (slow_ & ~no_front); }
  /// True while freed blocks wait for events or a capture (both pool kinds).
  [[nodiscard]] bool has_pending() const noexcept { return slow_ >= pending_unit; }
  /// Raises this arena's active / active_bytes peaks (and the device's) to their current values.
  void raise_active_peaks() noexcept;

  // --- the front block's share (Note [Front block counters] in front_share.hpp) ------------------
  [[nodiscard]] front_share& share() noexcept { return share_; }
  /// A take-back's requested bytes, inside the share's write section: the block's request goes
  /// from `old_requested` to `requested` (current), the old one counts as freed.
  void take_requested(bool small, std::int64_t old_requested, std::int64_t requested) noexcept {
    arena_counter& c = counters_[static_cast<std::size_t>(arena_stat_kind::requested_bytes)][small ? 0 : 1];
    if (requested != old_requested) c.current.store(c.now() + requested - old_requested, std::memory_order_release);
    c.freed.store(c.freed.load(std::memory_order_relaxed) + old_requested, std::memory_order_release);
  }
  /// add()'s peak check for (kind, pool kind), whose value as readers see it is current + `extra`
  /// (not allocation or its bytes: no active peak). Outside any write section.
  void check_peak(arena_stat_kind kind, bool small, std::int64_t extra) noexcept {
    const auto k = static_cast<std::size_t>(kind);
    auto& pair = counters_[k];
    arena_counter& c = pair[small ? 0 : 1];
    const std::int64_t now = c.now() + extra;
    if (now > c.peak) [[unlikely]] {
      c.peak = now;
      raise_device_peak(stat_index(kind, small ? stat_pool::small_pool : stat_pool::large_pool));
    }
    const std::int64_t all = pair[0].now() + pair[1].now() + extra;
    if (all > all_peak_[k]) [[unlikely]] {
      all_peak_[k] = all;
      raise_device_peak(stat_index(kind, stat_pool::all));
    }
  }
  /// Makes the share real (the parked free and the pairs' counts into the counters, state 0),
  /// in a write section; no value a reader sees changes. Arena lock held.
  void fold_share() noexcept;
  /// Every counter as readers see it, consistent with the share (seqlock). Any thread.
  [[nodiscard]] counters_view read() const noexcept;

  /// Current value of device-peak index `index` (kind * 3 + pool, or oversize). Any thread.
  [[nodiscard]] std::int64_t current(std::size_t index) const noexcept { return read().current(index); }
  /// Adds current/allocated/freed values into `out` (no peaks). Any thread.
  void add_to(memory_stats& out) const noexcept;
  void reset_peaks() noexcept;
  void reset_accumulated() noexcept;

  /// The device's list of every arena's counters (device_peaks).
  std::atomic<arena_counters*> next{nullptr};
  /// The device's list of changed arenas (device_peaks; Note [Device totals]).
  arena_counters* next_changed = nullptr;
  /// What the device last read of this arena's currents (device_peaks' lock).
  std::array<std::int64_t, arena_stat_count> published{};

 private:
  /// Active (allocation + pending) and active bytes of pool kind `pool` (0 small, 1 large).
  [[nodiscard]] std::int64_t active_now(arena_stat_kind kind, std::size_t pool) const noexcept;
  void raise_device_peak(std::size_t index) noexcept { peaks_->raise(*this, index); }
  /// Puts the arena back on the device's list of changed arenas.
  void relist() noexcept;
  void after_allocation_slow() noexcept;

  friend class device_peaks;  // sets `unlisted` when it reads the arena under its lock

  /// slow_: the arena is not on the device's list of changed arenas; it has a cross-stream order;
  /// its frees park no front block; the count of pending frees, in the bits above.
  static constexpr std::uint64_t unlisted = 1;
  static constexpr std::uint64_t ordered = 2;
  static constexpr std::uint64_t no_front = 4;
  static constexpr std::uint64_t pending_unit = 8;

  device_peaks* peaks_;
  core::hybrid_mutex* owner_lock_;
  /// The rare cases of a call, checked with one load: `unlisted`, `ordered` and the freed blocks
  /// waiting for events or a capture (both pool kinds), in units of pending_unit. Written under
  /// the arena lock only (by the device too: it sets `unlisted` holding that lock).
  std::uint64_t slow_ = unlisted;
  std::array<std::array<arena_counter, 2>, arena_stat_kinds> counters_{};  // [kind][small, large]
  std::array<std::int64_t, arena_stat_kinds> all_peak_{};
  arena_counter oversize_;
  front_share share_;  // Note [Front block counters]
};

}  // namespace streampool::native
