// leftover_pages.hpp — the physical pages of a device's expandable segments that belong to no
// segment: pages the driver refused to take back (Note [Leftover pages]) and spare pages a page
// move unmapped on purpose for the growth that follows (Note [Moving free pages]). Counted in
// reserved_bytes; reused first by a growth; given back by release_cached or teardown. Owned by
// segment_pages (the page mechanics of expandable segments), under the device mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "native/device_context.hpp"
#include "native/segment_counters.hpp"
#include "streampool/driver.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

// Note [Leftover pages]
// Shrinking releases a page's handle first (legal while it is mapped) and then unmaps it; when the
// driver refuses either call the page simply stays mapped, in its free block, for the next
// empty_cache (a page whose handle is already released is marked `released_handle`). A failed
// growth cannot always do that: it must give back what it obtained (release every handle, unmap
// what it mapped), and during a capture on the device it may not (unmap and release are illegal
// then — the sim also refuses them while another device captures). So during a capture a failed
// growth keeps the pages it mapped with access (as free memory, like any growth), and whatever
// else it cannot give back becomes a *leftover*: kept with its handle (and its address while
// still mapped), counted in reserved_bytes (the memory is still ours: reserved_bytes keeps
// matching what the driver handed out), reused first by the next growth when unmapped, and given
// back by the next release_cached (empty_cache, OOM release-all), growth, or the allocator's
// destructor. A growth never maps over a leftover that is still mapped, and a reservation holding
// one is not freed. Leftovers are not trace events and not device allocs/frees. They exist only
// while the driver refuses a give-back.
// Accounting: a leftover belongs to no segment (it holds no block, and a still-mapped one is not
// in the segment map), so snapshots list leftovers on their own (memory_snapshot::leftover_pages,
// "leftover_pages" in the JSON: device, address or 0, size, pool kind) rather than as segments —
// a block-less segment would break the "blocks tile the segment" reading of every snapshot
// consumer, and PyTorch-shaped tools would draw it. The invariant, per device and pool kind:
//   reserved_bytes = sum of the segments' total_size + sum of the leftover pages' size
// (memory_snapshot::reserved_bytes(device)); the stress suites check it after every operation.

/// Marks a mapped page whose handle was released already (only the unmap is missing).
inline constexpr vmm_handle_t released_handle = ~vmm_handle_t{0};

/// A physical page the driver has not taken back yet (Note [Leftover pages]).
struct leftover_page {
  vmm_handle_t handle = 0;
  std::size_t bytes = 0;
  bool small = false;
  std::uintptr_t va = 0;  ///< still mapped at va; 0 when not mapped
  bool released = false;  ///< the handle is released; only the unmap is missing
  /// Unmapped on purpose by a page move, kept for the next growth (Note [Moving free pages]);
  /// only release_cached gives it back.
  bool spare = false;
  /// A spare whose old mapping may still be in use (Note [Moving pages still in use]): the
  /// streams of its last uses and the ticket of its free; the block it is mapped into next
  /// carries them, so its user is ordered after them. 0 when its last uses are done.
  std::uint64_t hazard_streams = 0;
  std::uint64_t hazard_ticket = 0;
};

/// The last uses of pages taken for a growth (union of streams, newest ticket).
struct page_hazard {
  std::uint64_t streams = 0;
  std::uint64_t ticket = 0;
};

class leftover_pages {
 public:
  leftover_pages(device_context& device, segment_counters& counters) noexcept
      : device_(&device), counters_(&counters) {}

  [[nodiscard]] bool empty() const noexcept { return pages_.empty(); }
  /// Room for `more` pages, so that keep() and keep_spare() cannot throw. @throws std::bad_alloc
  void reserve(std::size_t more) { pages_.reserve(pages_.size() + more); }
  /// Keeps a page the driver refused to take back; it now counts in reserved_bytes.
  void keep(const leftover_page& page) noexcept;
  /// Keeps the handle of a page a move took out of its segment; it stays counted in
  /// reserved_bytes. `hazard`: its last uses when they may not be done yet.
  void keep_spare(vmm_handle_t handle, std::size_t bytes, bool small, page_hazard hazard = {}) noexcept {
    pages_.push_back(leftover_page{handle, bytes, small, 0, false, true, hazard.streams, hazard.ticket});
  }
  /// Up to `wanted` unmapped, unreleased pages of `page` bytes into `handles`; they leave
  /// reserved_bytes (counted again when mapped). Spares with last uses are taken only when
  /// `with_hazards` (not during a capture: nothing could order their next user), and `hazard`
  /// accumulates them. Returns how many.
  [[nodiscard]] std::size_t take(vmm_handle_t* handles, std::size_t wanted, std::size_t page, bool with_hazards,
                                 page_hazard& hazard) noexcept;
  /// True when `handle` is a spare page no growth has taken yet.
  [[nodiscard]] bool has_spare(vmm_handle_t handle) const noexcept;
  /// Takes spare page `handle` (has_spare was true); it leaves reserved_bytes like take(). Returns
  /// the last uses it carries.
  [[nodiscard]] page_hazard take_spare(vmm_handle_t handle) noexcept;
  /// Gives back what the driver takes now; `spares_too`: the spare pages as well.
  void release(bool spares_too) noexcept;
  /// Releases and unmaps `page` as far as the driver lets it now; true when it is gone.
  [[nodiscard]] bool retire(leftover_page& page) noexcept;
  /// True when a leftover is still mapped in [lo, lo + bytes).
  [[nodiscard]] bool mapped_in(std::uintptr_t lo, std::size_t bytes) const noexcept;
  /// Bytes of spare pages of `page` bytes a growth can map.
  [[nodiscard]] std::size_t spare_bytes(std::size_t page) const noexcept;
  /// The leftover pages of `device`, for a snapshot.
  void append(int device, std::vector<leftover_page_info>& out) const;

 private:
  device_context* device_;
  segment_counters* counters_;
  std::vector<leftover_page> pages_;
};

}  // namespace streampool::native
