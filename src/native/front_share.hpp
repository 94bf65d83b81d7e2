// front_share.hpp — what the front block (front_block.hpp) owes an arena's counters: the free of
// the parked block and the accumulated counts of the pairs completed since the last fold, kept as
// one state word and the parked block's figures instead of counter updates, and the sequence
// counter that lets stats() of another thread read counters and share together. The counters
// (arena_stats.hpp) hold one and apply it for every reader. See Note [Front block counters].
#pragma once

#include <atomic>
#include <cstdint>

namespace streampool::native {

// Note [Front block counters]
// A front-block pair (Note [Front block]) used to make the free's counter updates at the park
// (allocation -1, its bytes -size, the inactive-split deltas, requested -r) and undo them at the
// take-back: about 60 of the pair's instructions restored values the counters had held. Now the
// park's free is represented by the parked state itself, and the counters (counters_) keep the
// values of the block allocated. The share, read by every reader of the counters (arena_counters
// ::read), is
//   state = 2 * N + P: P = 1 while a block is parked, N the pairs completed since the last fold;
//   size, small, split, split_bytes: the parked block's size and pool kind and what its free adds
//     to inactive_split and its bytes (the front block's memo, written only while state is 0);
//   requested: the parked block's requested bytes.
// Readers see current lowered by P's share (allocation -P, bytes -P*size, inactive_split
// +P*split, ..., requested -P*requested) and freed raised by what the frees and the take-backs
// would have added (allocation +P+N, bytes +(P+N)*size, inactive_split +P*max(0,-split) +
// N*|split|, the bytes alike, requested +P*requested); allocated is derived from both as before.
// A park is one store of state (+1) after the one of requested; a take-back another (+1: P back
// to 0, N one more) and requested bytes' real change, current by (new - old) and freed by old.
// A fold (settle, or a new memo) makes the share real: the counters get P's free and N's
// accumulated counts, state goes back to 0; it changes no value a reader sees, so no peak and no
// device total moves. Every path but the hot pair takes the arena lock through arena_mutex, whose
// settle folds, so resets, snapshots and the plain path see plain counters with state 0.
//
// Exactness. One thread: readers compute exactly the values the plain path's updates would have
// left (the sums above are those updates, added up). Peaks: the take-back's changes return
// values held since the last peak reset (resets fold; Note [Front block]), except requested bytes
// when the new request is larger, which are checked as add() checks; a park's increases (a
// positive split or split_bytes) are checked against the peaks as the plain free's add() did —
// once per memo: the memo is dropped at every fold, and between folds the arena's inactive-split
// counters do not change (a split or a merge runs only after a settle: arena_mutex, free_block,
// complete_pending) while peaks only rise, so a check that passed holds for every later park of
// the same memo. Other threads (stats() takes no arena lock; a device-peak
// rise reads busy arenas as they stand): a park changes one word, so a reader sees the free or
// not. A take-back and a fold change several words inside a write section of `seq` (odd during
// it); a reader reads seq, the counters, the share, seq again, and retries while seq was odd or
// moved, so it sees each arena as it stood between two such changes. Stores in a section are
// release, the reader's loads acquire: plain moves on x86, and ordered for the C++ model and TSan
// without fences. No write section reads counters (no peak raise inside one), so a writer never
// waits for itself.
//
// What it costs: a reader of an arena retries while its writer is inside a take-back (a few
// instructions) or a fold, and applies the share (a dozen adds while state is not 0); a fold
// writes the counters the pairs skipped, once per settle; the memo is checked again (~40
// instructions) after each fold. Measured with scripts/hot-path-instructions (Release, sim,
// callgrind): 354 -> 258 instructions per 512 B and 1 MiB pair, 325 -> 273 per 64 MiB pair.

/// The front block's share of an arena's counters (Note [Front block counters]). Written only by
/// the arena lock's holder; read by any thread.
struct front_share {
  static constexpr std::uint64_t parked_bit = 1;  ///< P; the pairs count from bit 1
  std::atomic<std::uint64_t> seq{0};              ///< odd inside a write section
  std::atomic<std::uint64_t> state{0};            ///< 2 * pairs + parked
  std::atomic<std::int64_t> requested{0};         ///< the parked block's requested bytes
  std::atomic<std::int64_t> size{0};              ///< the memo's block size
  std::atomic<std::int64_t> split{0};             ///< what its free adds to inactive_split
  std::atomic<std::int64_t> split_bytes{0};       ///< ... and to inactive_split_bytes
  std::atomic<bool> small{false};                 ///< its pool kind

  void begin_write() noexcept { seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void end_write() noexcept { seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  [[nodiscard]] std::uint64_t now() const noexcept { return state.load(std::memory_order_relaxed); }
};

}  // namespace streampool::native
