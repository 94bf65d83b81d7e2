// streampool/host_allocator.hpp — the pinned host caching allocator: page-locked host memory for
// staging buffers (the memory behind asynchronous host<->device copies), cached and reused in
// stream order like PyTorch's CachingHostAllocator, configured by the `pinned_*` keys of the
// allocator config. See docs/pytorch-compatibility.md "Pinned host memory".
#pragma once

#include "streampool/export.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/stats.hpp"

namespace streampool {

namespace host {
class host_cache;
}

/// Time spent in one kind of driver call, in microseconds (c10's DurationStat).
struct STREAMPOOL_API duration_stat {
  std::int64_t total = 0;
  std::int64_t max = 0;
  std::int64_t min = 0;  ///< 0 until the first call
  std::int64_t count = 0;

  void increase(std::int64_t amount) noexcept {
    total += amount;
    ++count;
    if (amount > max) max = amount;
    if (min == 0 || amount < min) min = amount;
  }
  [[nodiscard]] std::int64_t avg() const noexcept { return count == 0 ? 0 : total / count; }
  void reset_accumulated() noexcept { total = count = 0; }
  void reset_peak() noexcept { max = min = 0; }
};

/// Statistics of the host allocator, with the names of torch.cuda.host_memory_stats().
struct STREAMPOOL_API host_memory_stats {
  stat allocation;       ///< blocks handed out and not yet reusable (in use, or freed with copies pending)
  stat allocated_bytes;  ///< their (power-of-two) sizes
  stat segment;          ///< pinned ranges obtained from the driver (host_alloc or host_register)
  stat reserved_bytes;   ///< their sizes
  duration_stat host_alloc_time;  ///< time in host_alloc / malloc + page touching + host_register, us
  duration_stat host_free_time;   ///< time in host_free / host_unregister + free, us
  std::int64_t num_host_alloc = 0;  ///< driver allocations (= segment.allocated)
  std::int64_t num_host_free = 0;   ///< driver frees (= segment.freed)

  /// Flat map with PyTorch's key names: "allocation.current", "reserved_bytes.peak",
  /// "host_alloc_time.avg", "num_host_alloc", ...
  [[nodiscard]] std::map<std::string, std::int64_t> to_map() const;
  /// The map as a JSON object.
  [[nodiscard]] std::string to_json() const;
};

/// State of one block of the host allocator.
enum class host_block_state : std::uint8_t {
  in_use,   ///< handed out by allocate()
  pending,  ///< freed; waits for the events recorded on the streams that used it
  cached,   ///< free and reusable
};

struct STREAMPOOL_API host_block_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;            ///< the power-of-two block size
  std::size_t requested_size = 0;  ///< bytes asked for by its last allocation (0 when cached)
  host_block_state state = host_block_state::cached;
  bool from_reserve = false;       ///< carved from the reserve segment
  std::size_t pending_events = 0;  ///< events still to complete (pending blocks)
};

/// One pinned range obtained from the driver.
struct STREAMPOOL_API host_segment_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  bool registered = false;  ///< malloc + host_register (pinned_use_cuda_host_register), else host_alloc
  bool reserve = false;     ///< the reserve segment (pinned_reserve_segment_size_mb)
  std::size_t reserve_used = 0;  ///< bytes carved from it so far (reserve only)
};

/// Everything the host allocator holds, sorted by address, and its statistics.
struct STREAMPOOL_API host_snapshot {
  std::vector<host_segment_info> segments;
  std::vector<host_block_info> blocks;
  host_memory_stats stats;
  std::string allocator_settings;  ///< the pinned_* keys in effect, in config syntax

  /// {"allocator_settings": ..., "segments": [...], "blocks": [...], "stats": {...}}.
  [[nodiscard]] std::string to_json() const;
};

/// The pinned host caching allocator. Thread-safe. Build one with make_host_allocator().
///
/// Sizes are rounded up to a power of two and a freed block of the same size is reused. A block
/// that was used by copies on some streams (record_stream()) is reused only after events recorded
/// on those streams at deallocate() have completed: they are queried, never waited for, on the
/// allocation path (or by a background thread with `pinned_use_background_threads`).
class STREAMPOOL_API host_allocator {
 public:
  host_allocator(allocator_config config, std::shared_ptr<driver> drv);
  /// Gives every range back to the driver (host_free synchronises, so copies in flight finish
  /// first). Pointers still handed out become invalid.
  ~host_allocator();
  host_allocator(const host_allocator&) = delete;
  host_allocator& operator=(const host_allocator&) = delete;

  /// Page-locked host memory of at least `bytes`, usable by every device's copies.
  /// @throws error for size 0
  /// @throws out_of_memory when the host cannot pin that much (or the request is absurd)
  /// @throws cuda_error when the driver fails for another reason
  [[nodiscard]] void* allocate(std::size_t bytes);

  /// Returns memory from allocate(). nullptr is a no-op. The block becomes reusable at once if no
  /// stream was recorded on it, else once the work those streams had submitted by now is done.
  /// @throws error for a pointer this allocator did not hand out (or already freed); state unchanged
  void deallocate(void* ptr);

  /// Marks `ptr` as used by work on `stream` (a copy reading or writing it).
  /// @throws error for a pointer this allocator did not hand out, or `stream` not a live stream
  void record_stream(void* ptr, stream_t stream);

  /// Gives cached blocks back to the driver (after looking, without waiting, for completed
  /// events). Blocks in use or pending, and blocks carved from the reserve segment, stay.
  void empty_cache();

  [[nodiscard]] host_memory_stats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  [[nodiscard]] host_snapshot snapshot() const;

  /// True when `ptr` is the start of a block this allocator handed out and not yet freed.
  [[nodiscard]] bool owns(const void* ptr) const;

  [[nodiscard]] const allocator_config& config() const noexcept;
  [[nodiscard]] driver& host_driver() const noexcept;

 private:
  std::unique_ptr<host::host_cache> cache_;
};

/// A host allocator configured by the pinned_* keys of `config` on `drv`.
/// @throws error if `drv` is null
[[nodiscard]] STREAMPOOL_API std::unique_ptr<host_allocator> make_host_allocator(allocator_config config, std::shared_ptr<driver> drv);

/// make_host_allocator(config_from_env(), make_cuda_driver()).
/// @throws config_error as config_from_env()
[[nodiscard]] STREAMPOOL_API std::unique_ptr<host_allocator> make_host_allocator();

}  // namespace streampool
