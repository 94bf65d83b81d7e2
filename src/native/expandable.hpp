// expandable.hpp — expandable segments of the native backend (docs/pytorch-compatibility.md §2.13, `expandable_segments:True`):
// the design notes, the page geometry of a device, and `expandable_segments`, the part of a
// device's segment source that decides where to grow, reserves address ranges and chooses the
// pages to unmap; the page mechanics (map, unmap, the leftover pages of Note [Leftover pages]) are
// its segment_pages', the block side is the arena's block store's (mark_mapped, ...).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "native/block.hpp"
#include "native/device_context.hpp"
#include "native/segment_counters.hpp"
#include "native/segment_map.hpp"
#include "native/segment_pages.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/graph.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

// Note [Expandable segments]
// An expandable segment is one VMM reservation (vmm_reserve) per (stream, pool kind, private
// pool) — i.e. per arena and pool kind — that is backed page by page: one vmm_create handle per
// page, vmm_map + vmm_set_access as it grows. Its blocks tile the whole reservation like the
// blocks of a malloc'd segment, but a block may be *unmapped* (mapped = false): unmapped blocks
// are never in a free list; they live in a per-kind treap of the arena's block store, by address.
// Invariants: unmapped blocks start and end on page boundaries; two adjacent free mapped blocks,
// or two adjacent unmapped blocks, never exist (they are merged).
//   * Growth (the new-segment step of the OOM ladder, docs/pytorch-compatibility.md §2.3): the fraction check uses
//     get_allocation_size as for a cudaMalloc (docs/pytorch-compatibility.md §2.13); then the lowest unmapped block that,
//     together with a free block right before it, starts enough contiguous growable bytes is
//     mapped — only the rounded request, in whole pages — and merges with its free neighbours.
//     A new reservation is made only when no such run exists (find_growable). The map counts as
//     one device alloc (num_device_alloc, reserved_bytes, trace segment_map); the `segment`
//     statistic is not changed.
//   * Shrinking happens only in release_cached (empty_cache and the OOM ladder's release-all), and
//     so never while a capture is underway nor in a private pool that is still in use: every free
//     mapped block of an expandable segment gives back the pages lying entirely inside it
//     (partial pages stay mapped), split around the hole. Unmap does not synchronise, so the
//     arena's stream is synchronised first. A reservation left with no mapped page is freed.
//     GC and release_available_cached_blocks skip expandable blocks.
//   * Best fit (docs/pytorch-compatibility.md §2.6): when the best-fitting block is expandable, the search moves on to the
//     next block in (size, address) order while that one's size plus the unmapped range right
//     after it is smaller: a free block at the growth frontier is taken last.
//   * Splits: remaining >= 512 bytes splits in both pool kinds (docs/pytorch-compatibility.md §2.7); inactive_split
//     statistics ignore expandable blocks (docs/pytorch-compatibility.md §2.14).
//   * A cache hit never touches any of this: the hot path differs only by one flag test.
// If the device has no VMM (device_info.vmm_supported) or vmm_reserve answers not_supported, the
// device falls back to normal segments for good, with one warning per allocator.

// Note [Pages of a private pool]
// A private pool's large segments may have pages of their own size (pool_options::page_bytes),
// chosen when a segment is reserved and kept in segment::page, so segments of one arena always
// agree (an arena belongs to one pool). The default for a sleepable pool is 64 MiB (or the
// allocator's large page when larger): a discard wake creates and maps one page at a time, and on
// the H200 each page costs about 50 us of driver time whatever its size (cuMemCreate ~17 us,
// cuMemMap ~1.4 us, cuMemSetAccess ~32 us), so 20 MiB pages wake at 1.9-2.8 ms/GiB and 64 MiB pages
// at 0.8-1.4 ms/GiB (docs/benchmarks.md, "Sleep and wake"). The cost is the unused tail of the
// last mapped page of each arena: at most one page per stream of the pool. Small-pool pages stay
// 2 MiB. The default pool's pages are the geometry's: its shared arena (cross_stream_reuse) moves
// pages between streams by that size (Note [Moving free pages]).
inline constexpr std::size_t sleepable_page_bytes = std::size_t{64} << 20;
/// The largest pool_options::page_bytes (16 TiB, as large_segment_size_mb).
inline constexpr std::size_t max_page_bytes = std::size_t{16} << 40;

/// Page sizes and reservation size of one device's expandable segments.
struct vmm_geometry {
  std::size_t small_page = 0;     ///< 2 MiB rounded up to the mapping unit
  std::size_t large_page = 0;     ///< large_segment_size rounded up to the mapping unit
  std::size_t alignment = 0;      ///< power of two passed to vmm_reserve
  std::size_t total_memory = 0;   ///< device memory, for the reservation fraction
  double reserve_fraction = 9.0 / 8.0;
  std::size_t reserve_bytes = 0;  ///< config override (0 = use the fraction)

  [[nodiscard]] std::size_t page(bool small) const noexcept { return small ? small_page : large_page; }
  /// The page of a new segment of this pool kind in a pool with these options (null: the default
  /// pool): Note [Pages of a private pool].
  [[nodiscard]] std::size_t page(bool small, const pool_options* options) const noexcept;
  /// Bytes to reserve for a new segment with pages of `page` bytes that must hold `request` bytes:
  /// ceil(total_memory x fraction / page) pages (or reserve_bytes rounded up), at least the request.
  [[nodiscard]] std::size_t reservation(std::size_t page, std::size_t request) const noexcept;
};

/// The geometry for `info` (vmm_supported) under `config`. The mapping unit is a common multiple
/// of the VMM granularity and 2 MiB, so that every page boundary is a 2 MiB granule boundary of
/// the segment map (Note [Pointer lookup]).
[[nodiscard]] vmm_geometry make_vmm_geometry(const device_info& info, const allocator_config& config) noexcept;

/// The expandable segments of one device: whether the device has VMM (probed at first use, with
/// the fallback to normal segments), growth in place, shrinking, page moves; their pages through
/// segment_pages. Device mutex (and the lock of the arena concerned) held for everything.
class expandable_segments {
 public:
  /// `vmm_warned` is the allocator's "expandable segments fell back" warning flag (one warning).
  expandable_segments(device_context& device, segment_map& segments, segment_counters& counters,
                      std::atomic<bool>& vmm_warned);

  /// True while the device uses expandable segments; the first call probes the device (a device
  /// without VMM falls back to normal segments for good, with one warning).
  /// @throws cuda_error when the device cannot be queried
  [[nodiscard]] bool enabled();
  /// True when the device can make expandable segments, wanted or not (a sleepable pool's segments
  /// are expandable whatever expandable_segments says: pool_options::sleepable). Probes like enabled().
  /// @throws cuda_error when the device cannot be queried
  [[nodiscard]] bool available();
  /// expandable_segments changed at run time (device mutex held): new segments are expandable from
  /// now on, or normal; existing segments stay what they are. A device that fell back for lack of
  /// VMM support stays off.
  void set_wanted(bool wanted) noexcept;
  /// Growth for a request of `rounded` bytes (the new-segment step of the OOM ladder): a free
  /// block of >= `rounded` bytes in no list, nullptr when out of memory — or when vmm_reserve
  /// said not_supported just now, after which enabled() is false. The caller checked the cap.
  /// @throws cuda_error on other driver errors (Note [Leftover pages] for what is kept)
  /// `fresh`: in a new reservation, next to no free block (Note [Growth next to another stream's
  /// free block] in page_moves.cpp).
  [[nodiscard]] block* grow(stream_arena& a, std::size_t rounded, bool small, bool fresh = false);
  /// Gives back every wholly free page of the arena's expandable segments (release_cached) and
  /// frees reservations left with nothing mapped. @throws cuda_error (the page stays mapped)
  void unmap_free_pages(stream_arena& a);
  /// Gives back the leftover pages the driver takes now (Note [Leftover pages]); `spares_too`:
  /// also the pages a move kept for the next growth (Note [Moving free pages]).
  void release_leftovers(bool spares_too = true) noexcept { pages_.leftovers().release(spares_too); }
  /// Allocator teardown: unmaps, releases and frees a reservation (status form).
  void release_at_exit(const segment& seg) noexcept { pages_.release_at_exit(seg); }
  /// The leftover pages, for a snapshot.
  void append_leftovers(std::vector<leftover_page_info>& out) const { pages_.leftovers().append(index_, out); }

 private:
  enum class vmm_mode : std::uint8_t { unknown, on, off };

  /// The device's properties. @throws cuda_error when they cannot be read
  [[nodiscard]] device_info probe() const;
  void fall_back_to_normal_segments(const std::string& reason);
  [[nodiscard]] block* reserve_segment(stream_arena& a, bool small, std::size_t rounded);
  /// Takes at most `max_pages` whole pages (the highest) out of free block `b`: their handles
  /// become spare pages for the next growth, their mappings ghosts until idle (carrying the
  /// block's last uses when `in_use`); returns how many (Note [Moving pages still in use]).
  std::size_t move_out(stream_arena& a, segment& seg, block* b, std::size_t max_pages, bool in_use);
  /// Before a growth of a shared arena: unmaps the ghosts seen idle, then moves free pages so that
  /// reserved memory does not pass its peak (Note [Moving free pages], page_moves.cpp).
  void reclaim_pages(stream_arena& a, std::size_t rounded, bool small);
  void destroy(stream_arena& a, segment* seg);

  device_context* device_;
  driver* drv_;
  int index_;
  segment_counters* counters_;
  std::atomic<bool>* vmm_warned_;
  vmm_mode mode_;
  bool unsupported_ = false;  ///< fell back to normal segments: the device has no VMM support
  vmm_geometry geometry_;
  segment_pages pages_;
};

}  // namespace streampool::native
