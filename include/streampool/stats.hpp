// streampool/stats.hpp — statistics, snapshots and the allocation trace, identical on both
// backends. Statistic names and meanings follow PyTorch's (docs/pytorch-compatibility.md §2.14, §2.15) so existing tooling
// reads them unchanged: `to_map()` yields "allocated_bytes.all.current" and friends.
#pragma once

#include "streampool/export.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streampool/driver.hpp"
#include "streampool/graph.hpp"

namespace streampool {

/// One statistic: current value, peak since reset, cumulative increases and decreases.
struct STREAMPOOL_API stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void increase(std::int64_t amount) noexcept {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t amount) noexcept {
    current -= amount;
    freed += amount;
  }
  void reset_peak() noexcept { peak = current; }
  void reset_accumulated() noexcept { allocated = freed = 0; }
};

/// Index of a stat array: every block, blocks of the small pool (<= 1 MiB), of the large pool.
enum class stat_pool : std::uint8_t { all = 0, small_pool = 1, large_pool = 2 };
inline constexpr std::size_t stat_pool_count = 3;
using stat_array = std::array<stat, stat_pool_count>;

/// Per-device statistics (docs/pytorch-compatibility.md §2.14).
struct STREAMPOOL_API memory_stats {
  stat_array allocation;            ///< live allocations
  stat_array segment;               ///< device mallocs held (not changed by expandable map/unmap)
  stat_array active;                ///< allocated or waiting for events
  stat_array inactive_split;        ///< free blocks of split (non-expandable) segments
  stat_array allocated_bytes;       ///< rounded sizes of live allocations
  stat_array reserved_bytes;        ///< bytes obtained from the device
  stat_array active_bytes;
  stat_array inactive_split_bytes;
  stat_array requested_bytes;       ///< unrounded sizes of active blocks
  stat oversize_allocations;
  stat oversize_segments;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_sync_all_streams = 0;
  std::int64_t num_device_alloc = 0;  ///< device mallocs + VMM maps
  std::int64_t num_device_free = 0;   ///< device frees + VMM unmaps
  std::int64_t max_split_size = 0;
  // cross_stream_reuse:True only (streampool's own keys; docs/cross-stream-reuse.md):
  std::int64_t num_cross_stream_reuses = 0;   ///< free blocks handed to another stream than their last user's
  std::int64_t num_cross_stream_waits = 0;    ///< cudaStreamWaitEvent calls inserted to order such a reuse
  std::int64_t num_cross_stream_fences = 0;   ///< fence events recorded on the streams that freed memory
  std::int64_t num_fence_host_waits = 0;      ///< fences waited for on the host before unmapping a moved page's old mapping
  std::int64_t num_moved_pages = 0;           ///< free pages moved so a growth did not raise reserved

  /// Flat map with PyTorch's key names ("allocated_bytes.all.current", "num_ooms", ...).
  [[nodiscard]] std::map<std::string, std::int64_t> to_map() const;
  /// The map as a JSON object.
  [[nodiscard]] std::string to_json() const;
  void reset_peak() noexcept;
  void reset_accumulated() noexcept;
};

enum class block_state : std::uint8_t { active_allocated, active_pending_free, inactive };

struct STREAMPOOL_API block_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;
  block_state state = block_state::inactive;
  /// The stream that allocated the block, or for a free block the stream of its last use (a
  /// free block of a shared cross_stream_reuse arena may be handed to another stream next).
  stream_t stream = nullptr;
};

/// One segment (a device malloc, or a contiguous mapped range of an expandable segment).
struct STREAMPOOL_API segment_info {
  int device = 0;
  std::uintptr_t address = 0;
  std::size_t total_size = 0;
  std::size_t allocated_size = 0;
  std::size_t active_size = 0;
  std::size_t requested_size = 0;
  stream_t stream = nullptr;
  bool is_large = true;  ///< segment_type "large" or "small"
  mempool_id pool;
  bool is_expandable = false;
  std::vector<block_info> blocks;  ///< by address
  /// An expandable segment's physical page (one VMM handle each, from `address` on); 0 otherwise.
  std::size_t page_size = 0;
  /// Its pool sleeps (docs/sleep-wake.md): the memory went back to the device, so this segment is
  /// not in reserved_bytes until wake(); its blocks live on. The last two members are last so that
  /// aggregate initialisation of the earlier members keeps compiling.
  bool is_asleep = false;
};

/// A physical page of an expandable segment that the native backend holds outside every segment:
/// a failed growth could not give it back yet (the driver refused, or a capture was underway;
/// Note [Leftover pages] in src/native/leftover_pages.hpp). It is counted in reserved_bytes (of the
/// pool kind given by is_large) and given back by a later growth, empty_cache or the allocator's
/// destructor. Per device: reserved_bytes = sum of segments' total_size + sum of leftover pages'
/// size.
struct STREAMPOOL_API leftover_page_info {
  int device = 0;
  std::uintptr_t address = 0;  ///< still mapped there (an unmap was refused); 0 when not mapped
  std::size_t size = 0;        ///< the page size
  bool is_large = true;        ///< a page of the large pool ("large") or the small pool ("small")
};

/// Kinds of trace entries (docs/pytorch-compatibility.md §2.15); names match docs/trace-format.md.
enum class trace_action : std::uint8_t {
  alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot
};
[[nodiscard]] STREAMPOOL_API std::string_view to_string(trace_action action) noexcept;

struct STREAMPOOL_API trace_entry {
  trace_action action = trace_action::alloc;
  int device = 0;
  std::uintptr_t address = 0;  ///< for oom: device free bytes
  std::size_t size = 0;        ///< requested bytes for alloc/free_*, segment size for segment_*
  stream_t stream = nullptr;
  mempool_id pool;
  std::uint64_t time_us = 0;   ///< host clock, microseconds since the epoch
};

/// Receives an allocator's segment events (segment_alloc, segment_free, segment_map,
/// segment_unmap) as they happen: allocator::set_segment_listener().
using segment_listener = std::function<void(const trace_entry&)>;

/// A snapshot of one allocator: segments sorted by address, plus the trace if recording.
struct STREAMPOOL_API memory_snapshot {
  std::vector<segment_info> segments;
  std::vector<trace_entry> trace;
  std::string allocator_settings;  ///< the config text in effect
  /// Pages reserved outside every segment (native expandable segments only; usually empty). Last,
  /// so that aggregate initialisation of the earlier members keeps compiling.
  std::vector<leftover_page_info> leftover_pages;
  /// JSON in the shape of torch.cuda.memory._snapshot() ("segments", "device_traces", ...), plus
  /// "leftover_pages" (streampool's addition; an empty list when there are none).
  [[nodiscard]] std::string to_json() const;
  /// Bytes of `device` held as leftover pages.
  [[nodiscard]] std::size_t leftover_bytes(int device) const noexcept;
  /// Bytes of `device` this snapshot accounts for: its segments plus its leftover pages. Equals
  /// stats(device).reserved_bytes.all.current when both are taken with no call in between.
  [[nodiscard]] std::size_t reserved_bytes(int device) const noexcept;
};

/// Writes `entries` as CSV "action,addr,size,stream,time_us" (the shared trace format).
[[nodiscard]] STREAMPOOL_API std::string trace_to_csv(const std::vector<trace_entry>& entries);

/// "512 bytes", "1.50 KiB", "2.00 MiB", "3.25 GiB" (docs/pytorch-compatibility.md §2.10 format_size).
[[nodiscard]] STREAMPOOL_API std::string format_size(std::size_t bytes);

/// `text` as a JSON string literal, quotes included (the quoting every to_json() here uses).
[[nodiscard]] STREAMPOOL_API std::string json_quote(std::string_view text);

}  // namespace streampool
