// front_block.hpp — the front block of a stream arena: the block its last hot free gave back,
// held aside instead of being merged into the free lists, so that the next allocation of the same
// size on the stream takes it back without touching them (the cache-hit pair of issue 30). Exact:
// the statistics, the addresses handed out and every list another path reads are those of the
// plain free. The hot operations (park, take back, settle) are inline here; the check whether a
// block may be parked and the settle's merge are in front_block.cpp. See Note [Front block].
#pragma once

#include <cstddef>
#include <cstdint>

#include "native/arena_stats.hpp"
#include "native/block.hpp"
#include "native/block_store.hpp"
#include "native/block_treap.hpp"
#include "native/device_context.hpp"
#include "native/front_share.hpp"
#include "native/live_blocks.hpp"
#include "native/size_rounding.hpp"

namespace streampool::native {

// Note [Front block]
// A cache-hit pair on one stream used to free a block into its arena's free lists (merging it with
// its free neighbour, recycling that block object, inserting the merged block) and then allocate
// it again (best fit, removal, split, inserting the rest): about 300 of its 760 instructions moved
// blocks between treaps and bitmaps only to restore the state they started from. Now a hot free
// may park the block instead: it stays detached (allocated == false, in no list) as the arena's
// front block, the statistics and the trace change exactly as for the plain free (so stats() of
// any thread, the device peaks and the trace see the free), and the lists keep the neighbour it
// would have merged with. The next hot allocation of the arena takes it back when the plain path
// would have handed out exactly it: same rounded size, and the merged block M (the block and its
// free neighbour after it) is the best fit for that size and would be split back at the same place.
// The pair then changes the lists not at all, which is what the plain free and allocation did in
// sum.
//
// Which blocks may be parked: a block of the default pool (private pools' allocations never take
// the hot path), not in an expandable segment (its best-fit rule looks at unmapped ranges), of an
// arena without a cross-stream order, whose lower neighbour is not free (M must start at the
// block's address), and for which M is the best fit of the block's own size among the free blocks
// the plain free would leave (the neighbour replaced by M). That last check searches the lists
// (fits_after_merge in front_block.cpp, ~40 instructions); its answer, with the statistics the
// free makes, is memoised with the block store's version, which every list change moves on, so a
// steady pair pays two compares for it.
//
// Exactness rests on one rule: the front block exists only between a hot free and the next use of
// the arena. Every other path takes the arena lock through arena_mutex::lock(), which first
// settles the front block (the merge and insert the plain free would have made, stamped with the
// GC clock of the free); so do a hot allocation that misses, and a hot free of another block. The
// trace is made at the free; the statistics are the share's (Note [Front block counters] in
// front_share.hpp): the parked state stands for the free's updates, and settling folds them into
// the counters. A take-back's counters return to values they held since the last peak reset
// (which settles), so no peak can move, and the plain path's checks would have found nothing;
// requested bytes differ per call and keep their peak check when they rise.
//
// Measured (callgrind on the sim, scripts/hot-path-instructions, with Note [Newest live block]):
// 763 -> 356 instructions per 512 B and 1 MiB pair, 536 -> 327 per 64 MiB pair; with the
// slow-entry word and Note [Front block counters], 258 and 273.
//
// What it costs: the arena keeps one more block aside (no memory: the block is free, it is only not
// yet in a list); a hot free of another block while one is parked, and any slow path, pays the
// settle (the old free's work, done later); a parked block's merged neighbour keeps the GC stamp of
// its split until the take-back restamps it. The sleep feature (a pool's memory made unreachable to
// the hot path) needs the front block out of the way too: stream_arena::set_front_enabled(false)
// settles it and keeps frees from parking (a bit of the free's existing flag word, no new check).

// Note [Hot free]
// native_allocator::do_deallocate first tries the common free on its own: the newest allocation
// of the arena, with no stream uses, no history to record and nothing parked yet, parked as the
// front block (free_newest). That path makes no call the compiler must keep values across, so
// do_deallocate keeps no stack frame for it (inlined whole, the free's table lookups, events and
// trace entries made it save registers on every free). Anything else changes nothing and goes to
// native_allocator::deallocate_plain, which takes the lock again and runs the whole free: a rare
// free pays one more segment-map lookup and lock. The allocation's take-back likewise leaves the
// pair to the plain path while history is on (stream_arena::take_front), which hands out the same
// block and traces it, so it builds no trace entry. Both: 258 -> 246 instructions per pair at
// 512 B and 1 MiB, 273 -> 260 at 64 MiB (scripts/hot-path-instructions, Release, the sim); with
// Note [Front block rules] and the memo's splits_, 243 / 243 / 249.

// Note [Front block rules]
// A take-back must obey the size rules the plain path would apply to M (should_split, and for a
// large block the oversize reuse rule), which set_settings may change at run time. Their answer
// depends only on M's size, the block's size (the take-back's request is exactly it) and the
// rules, so the front block keeps the version of the rules under which it last passed
// (size_policy::version) and asks them again only when the version changed or a new memo was
// made (check() resets it): on the common pair that is a load and a compare instead of both
// rules' loads and branches (8 instructions fewer per pair at 64 MiB, 3 at 512 B; callgrind, sim).
/// The front block of one arena and the memo of its check (Note [Front block]), over the arena's
/// block store, hot statistics and device context; arena lock held for everything.
class front_block {
 public:
  front_block(block_store& blocks, arena_counters& stats, device_context& device) noexcept
      : blocks_(&blocks), stats_(&stats), device_(&device) {}
  front_block(const front_block&) = delete;
  front_block& operator=(const front_block&) = delete;

  [[nodiscard]] const block* parked() const noexcept { return parked_; }
  /// Parks freed block `b` (in no list, the lists settled, its free's trace and flags done, its
  /// counters not yet changed) when the plain path would hand it out again for its own size: the
  /// parked state stands for the free's counter updates (Note [Front block counters] in
  /// front_share.hpp), true. False, nothing changed, otherwise.
  [[gnu::always_inline]] bool park(block* b) noexcept {
    if (device_->policy->is_oversize(b->size)) [[unlikely]] return false;  // the plain free counts it
    if (checked_ != b || checked_version_ != blocks_->version()) [[unlikely]] return park_checked(b);
    if (!checked_ok_) return false;
    park_unchecked(b);
    return true;
  }
  /// The hot free (Note [Hot free]): the newest live block of `live` at `ptr`, with no stream uses,
  /// parked when nothing is parked, no history is recorded and the free has no flag; true. False,
  /// nothing changed, otherwise.
  [[gnu::always_inline]] bool free_newest(live_blocks& live, std::uintptr_t ptr) noexcept {
    block* b = live.take_newest(ptr);
    if (b == nullptr) [[unlikely]] return false;
    if (parked_ == nullptr && b->uses.empty() && !device_->trace.enabled() && stats_->free_flags() == 0) [[likely]] {
      b->allocated = false;
      if (park(b)) [[likely]] return true;
      b->allocated = true;
    }
    live.put_back(b);
    return false;
  }
  /// The parked block when the plain path would hand it out for `rounded` now: taken back, with
  /// alloc_found's fields and the counters' changes that differ from the plain pair's (not the
  /// live map, not the trace: the arena's). Else nullptr, nothing changed.
  [[gnu::always_inline]] block* take(std::size_t rounded, std::size_t requested, stream_t stream) noexcept {
    block* b = parked_;
    if (b == nullptr || b->size != rounded) return nullptr;
    const bool small = b->seg->small;
    const bool splits = splits_;  // merged_ != rounded (= b->size): the plain path splits M again at b's end
    // The plain path's choices for M, whose rules may have changed since (Note [Size rules
    // changed at run time]); a default-pool arena has no no_split option.
    const size_policy& policy = *device_->policy;
    if (const std::uint64_t rules = policy.version(); rules != rules_version_) [[unlikely]] {
      // Note [Front block rules]: asked once per memo and version of the rules.
      if (splits && !policy.should_split(small, merged_, rounded)) return nullptr;
      if (!small && !policy.may_reuse(merged_, rounded)) return nullptr;
      rules_version_ = rules;
    }
    if (!small && device_->gc_enabled.load(std::memory_order_relaxed)) {
      device_->gc_clock.fetch_add(1, std::memory_order_relaxed);  // docs/pytorch-compatibility.md §2.6
    }
    parked_ = nullptr;
    const auto old_requested = static_cast<std::int64_t>(b->requested_size);
    b->allocated = true;
    b->requested_size = requested;
    b->stream = stream;
    // The pair's counters (Note [Front block counters]): P back to 0 and one pair more, and the
    // requested bytes, in one write section.
    front_share& share = stats_->share();
    share.begin_write();
    share.state.store(share.now() + 1, std::memory_order_release);
    stats_->take_requested(small, old_requested, static_cast<std::int64_t>(requested));
    share.end_write();
    stats_->after_allocation();
    if (static_cast<std::int64_t>(requested) > old_requested) [[unlikely]] {
      stats_->check_peak(arena_stat_kind::requested_bytes, small, 0);
    }
    if (policy.is_oversize(b->size)) [[unlikely]] stats_->change_oversize(1);
    // The plain split's insert of the rest stamps it (large blocks only).
    if (splits && !small) b->next->gc_count_base = device_->gc_clock.load(std::memory_order_relaxed);
    return b;
  }
  /// Puts the parked block into the free lists as the plain free would have, and folds the
  /// share into the counters (Note [Front block counters]).
  void settle() noexcept {
    if (stats_->share().now() != 0) [[unlikely]] settle_parked();
  }

 private:
  /// Decides whether `b` may be parked and what its free does to the statistics, into the memo
  /// and the share's figures (state 0).
  void check(const block* b) noexcept;
  /// park() with the memo out of date: folds, checks, parks, and checks the peaks the park raises.
  [[gnu::noinline]] bool park_checked(block* b) noexcept;
  [[gnu::always_inline]] void park_unchecked(block* b) noexcept {
    parked_ = b;
    gc_stamp_ = device_->gc_clock.load(std::memory_order_relaxed);  // what insert_free would stamp
    front_share& share = stats_->share();
    share.requested.store(static_cast<std::int64_t>(b->requested_size), std::memory_order_relaxed);
    share.state.store(share.now() + 1, std::memory_order_release);  // P = 1: after requested
  }
  [[gnu::noinline]] void settle_parked() noexcept;

  block_store* blocks_;
  arena_counters* stats_;
  device_context* device_;
  block* parked_ = nullptr;     ///< the block, or nullptr
  std::uint64_t gc_stamp_ = 0;  ///< the GC clock at its free (M's gc_count_base when settled)
  // The memo: what the last check found for block `checked_` while the lists were at version
  // `checked_version_`; the parked block is always the checked one. Dropped at every fold (its
  // peak check holds until then: Note [Front block counters]).
  const block* checked_ = nullptr;
  std::uint64_t checked_version_ = 0;
  bool checked_ok_ = false;          ///< it may be parked
  std::size_t merged_ = 0;           ///< the size of M: the block and its free upper neighbour
  std::uint64_t rules_version_ = 0;  ///< the size rules' version under which a take-back of M passed (0: none)
  bool splits_ = false;              ///< merged_ != the block's size: a take-back splits M again
};

}  // namespace streampool::native
