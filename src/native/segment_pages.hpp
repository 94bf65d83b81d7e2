// segment_pages.hpp — the physical pages of one device's expandable segments: mapping pages into a
// reservation (one handle per page, leftover pages first, then access), unmapping and releasing
// them, and the bookkeeping of every page that changes state (segment map, reserved_bytes,
// num_device_alloc/free, the trace, the block side). What the driver refuses to take back stays a
// leftover page, owned here (Note [Leftover pages]). Which pages to map or unmap, and the
// reservations themselves, are expandable_segments' (expandable.hpp). Device mutex held, and the
// lock of the arena concerned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "native/block.hpp"
#include "native/device_context.hpp"
#include "native/leftover_pages.hpp"
#include "native/segment_counters.hpp"
#include "native/segment_map.hpp"
#include "streampool/driver.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

class stream_order;

/// A page a move took out of its segment while its old mapping may still be in use (Note [Moving
/// pages still in use] in page_moves.cpp): the old mapping, unmapped once its last uses are done.
struct ghost_mapping {
  std::uintptr_t va = 0;
  std::size_t bytes = 0;
  vmm_handle_t handle = 0;  ///< mapped at va; also a spare page, or mapped again elsewhere
  page_hazard hazard;
};

class segment_pages {
 public:
  segment_pages(device_context& device, segment_map& segments, segment_counters& counters) noexcept;

  /// Maps the first `bytes` (rounded up to whole pages) of unmapped block `b` of arena `a`; returns
  /// the free block they merge into, or nullptr when out of memory, or when a leftover page is
  /// still mapped there (Note [Leftover pages]; during a capture what got mapped is kept as free
  /// memory). A page whose ghost mapping is still there with its handle unused is taken back as it
  /// is (Note [Moving pages still in use]). @throws cuda_error on other driver errors (what was
  /// obtained goes back first)
  [[nodiscard]] block* map(stream_arena& a, block* b, std::size_t bytes);
  /// Releases and unmaps the whole pages inside free block `b` of `seg`, page by page.
  /// @throws cuda_error when the driver refuses (that page and the ones after it stay mapped)
  void unmap(stream_arena& a, segment& seg, block* b);
  /// After `count` pages from page `first` inside free block `b` were unmapped: segment map,
  /// page count, statistics and trace (`reserved_changes`: false for spare pages, still ours),
  /// and the block side (the hole).
  void forget(stream_arena& a, segment& seg, block* b, std::size_t first, std::size_t count, bool reserved_changes);
  /// Allocator teardown: unmaps, releases and frees a reservation (status form).
  void release_at_exit(const segment& seg) noexcept;

  /// Room for `more` ghost mappings, so that keep_ghost() cannot throw. @throws std::bad_alloc
  void reserve_ghosts(std::size_t more) { ghosts_.reserve(ghosts_.size() + more); }
  void keep_ghost(const ghost_mapping& ghost) noexcept { ghosts_.push_back(ghost); }
  /// Unmaps the ghost mappings in [lo, lo + bytes) whose last uses are done; with `wait`, waits
  /// for the others first (an event synchronize per stream). @throws cuda_error when a wait, a
  /// query or, with `wait`, an unmap fails (the ghost stays)
  void settle_ghosts(stream_order* order, std::uintptr_t lo, std::size_t bytes, bool wait);
  /// True when a ghost mapping lies in [lo, lo + bytes).
  [[nodiscard]] bool ghost_in(std::uintptr_t lo, std::size_t bytes) const noexcept;
  [[nodiscard]] bool has_ghosts() const noexcept { return !ghosts_.empty(); }

  [[nodiscard]] leftover_pages& leftovers() noexcept { return leftovers_; }
  [[nodiscard]] const leftover_pages& leftovers() const noexcept { return leftovers_; }

 private:
  /// map() for `bytes` (whole pages) from `b` without ghost mappings to take back: new mappings.
  [[nodiscard]] block* map_fresh(stream_arena& a, block* b, std::size_t bytes);
  /// Takes back the first `count` pages of `b`, ghost mappings whose handles are unused spares.
  [[nodiscard]] block* revive(stream_arena& a, block* b, std::size_t count);
  /// The ghost mapping at `va` whose handle is still an unused spare, or nullptr.
  [[nodiscard]] const ghost_mapping* revivable(std::uintptr_t va) const noexcept;
  void count_mapping(const stream_arena& a, const segment& seg, std::uintptr_t lo, std::size_t bytes, bool mapped,
                     bool reserved_changes = true);
  /// The pages [first, first + count) of `seg` (the first `mapped` of them mapped) go back to the
  /// driver, or become leftovers where it refuses (Note [Leftover pages]).
  void give_back(segment& seg, std::size_t first, std::size_t mapped, std::size_t count) noexcept;

  device_context* device_;
  driver* drv_;
  int index_;
  segment_map* segments_;
  segment_counters* counters_;
  leftover_pages leftovers_;
  std::vector<ghost_mapping> ghosts_;
};

}  // namespace streampool::native
