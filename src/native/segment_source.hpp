// segment_source.hpp — where one device's memory comes from and goes back to: new segments
// (cudaMalloc), expandable growth and shrinking (through expandable_segments), the release of
// whole free segments (garbage collection, release_available_cached_blocks, release_cached), the
// memory-fraction cap, the segment map writes and the device-wide segment statistics. The only
// native code that asks the driver for memory or gives it back. Device mutex held throughout,
// and the lock of every arena it is handed.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "core/memory_cap.hpp"
#include "native/block.hpp"
#include "native/device_context.hpp"
#include "native/expandable.hpp"
#include "native/pool_sleep.hpp"
#include "native/segment_counters.hpp"
#include "native/segment_map.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

class segment_source {
 public:
  /// `vmm_warned` is the allocator's "expandable segments fell back" warning flag (one warning).
  segment_source(device_context& device, segment_map& segments, std::atomic<bool>& vmm_warned);
  segment_source(const segment_source&) = delete;
  segment_source& operator=(const segment_source&) = delete;

  /// New memory for a request (the alloc_block step of docs/pytorch-compatibility.md §2.3): a block of >= `rounded` bytes
  /// of arena `a`, in no list, from expandable growth or a new segment; nullptr when out of memory
  /// or over the fraction cap. @throws cuda_error on other driver errors
  [[nodiscard]] block* grow(stream_arena& a, std::size_t rounded, bool small, bool fresh = false);
  /// Gives free block `b` of `a`, a whole malloc'd segment, back to the driver.
  /// @throws cuda_error when the driver refuses (nothing changed then)
  void release(stream_arena& a, block* b);

  // The release steps of the OOM ladder and of empty_cache (docs/pytorch-compatibility.md §2.10–§2.12).
  /// Bytes garbage collection should free (docs/pytorch-compatibility.md §2.11): reserved above the threshold of the cap.
  [[nodiscard]] std::size_t gc_target();
  /// Frees whole free segments of the default-pool arenas among `arenas` (all locked), oldest
  /// first by the large-pool search clock, until `target` bytes are freed.
  void garbage_collect(const std::vector<std::unique_ptr<stream_arena>>& arenas, std::size_t target);
  /// release_available_cached_blocks (max_split_size set): oversize free segments of `a`, enough
  /// for `rounded`. True when that much was freed.
  bool release_available(stream_arena& a, std::size_t rounded);
  /// Everything `a` holds free: its whole free segments and the free pages of its expandable ones.
  void release_free(stream_arena& a);
  /// The leftover pages the driver takes back now (Note [Leftover pages] in leftover_pages.hpp).
  void release_leftovers() noexcept { expandable_.release_leftovers(); }
  /// expandable_segments changed at run time (device mutex held; expandable_segments::set_wanted).
  void set_expandable(bool wanted) noexcept { expandable_.set_wanted(wanted); }
  /// Allocator teardown: every segment of `a` goes back to the driver, live blocks included
  /// (status form).
  void release_at_exit(stream_arena& a) noexcept;

  // The memory-fraction cap (docs/pytorch-compatibility.md §2.12), checked against what the device holds.
  // core::memory_cap, the rule both backends share (Note [Memory fraction]).
  void set_fraction(double fraction) noexcept { cap_.set_fraction(fraction); }
  [[nodiscard]] double fraction() const noexcept { return cap_.fraction(); }
  /// Bytes the cap allows (0 when there is no cap). @throws cuda_error when the device's size is
  /// unknown and cannot be read
  [[nodiscard]] std::size_t allowed_bytes();
  /// The device's memory as last read (0 when it was never needed).
  [[nodiscard]] std::size_t known_total_memory() const noexcept { return cap_.total_memory(); }

  [[nodiscard]] const segment_counters& counters() const noexcept { return counters_; }
  /// Sleep and wake of pools (pool_sleep.hpp): pages given back and taken again, with these counters.
  [[nodiscard]] pool_sleeper& sleeper() noexcept { return sleeper_; }
  void reset_peaks() noexcept { counters_.reset_peaks(); }
  void reset_accumulated() noexcept { counters_.reset_accumulated(); }
  void append_leftovers(std::vector<leftover_page_info>& out) const { expandable_.append_leftovers(out); }

 private:
  [[nodiscard]] block* new_segment(stream_arena& a, std::size_t alloc_size, bool small);
  /// cudaFree of a malloc'd segment, or its provider's deallocate (Note [Pool options]).
  /// @throws what the provider throws
  drv_result free_segment_memory(const stream_arena& a, const segment& seg);
  /// cudaMalloc, with the device mutex and `a`'s lock released around it under
  /// release_lock_on_cudamalloc:True (Note [Releasing the locks around cudaMalloc]).
  /// @throws std::bad_alloc (the memory given back first)
  [[nodiscard]] drv_result malloc_maybe_unlocked(stream_arena& a, std::size_t alloc_size, void** ptr);
  [[nodiscard]] std::size_t total_memory();

  device_context* device_;
  segment_map* segments_;
  segment_counters counters_;
  expandable_segments expandable_;
  pool_sleeper sleeper_;
  core::memory_cap cap_{0, 1.0};  // the device's total memory read at the cap's first use
};

}  // namespace streampool::native
