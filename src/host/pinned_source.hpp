// pinned_source.hpp (internal) — where the host allocator's memory comes from: driver host_alloc
// (cudaHostAlloc), or malloc + page touching + host_register (pinned_use_cuda_host_register), and
// the optional reserve segment that small blocks are carved from (pinned_reserve_segment_size_mb).
// Keeps the segment statistics and the driver-call timings. Thread-safe; driver calls are made
// outside its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "host/host_block.hpp"
#include "host/page_toucher.hpp"
#include "streampool/config.hpp"
#include "streampool/host_allocator.hpp"

namespace streampool::host {

class pinned_source {
 public:
  pinned_source(const allocator_config& config, driver& drv);
  pinned_source(const pinned_source&) = delete;
  pinned_source& operator=(const pinned_source&) = delete;

  /// Memory for a block of `size` bytes (a power of two): carved from the reserve segment when it
  /// fits there (the reserve is obtained on the first call), else a new driver range.
  /// @throws out_of_memory / cuda_error when the driver (or malloc) fails; nothing is kept then
  [[nodiscard]] block_origin obtain(std::size_t size, void** out);
  /// Gives a block's range back to the driver (not for reserve blocks). On failure the range is
  /// still held and the result says why.
  [[nodiscard]] drv_result release(void* ptr);
  /// Gives the reserve segment back (destruction only: its blocks must be gone).
  void release_reserve() noexcept;

  void add_stats(host_memory_stats& out) const;
  void reset_peak() noexcept;
  void reset_accumulated() noexcept;
  [[nodiscard]] std::vector<host_segment_info> segments() const;

 private:
  struct segment_rec {
    std::size_t size = 0;
    bool registered = false;
  };

  /// A new driver range of `bytes` (host_alloc or malloc + touch + host_register).
  [[nodiscard]] void* obtain_range(std::size_t bytes, bool* registered);
  [[nodiscard]] void* register_range(std::size_t bytes);
  /// host_free or host_unregister + free of a range; records the timing.
  [[nodiscard]] drv_result release_range(void* ptr, const segment_rec& rec);
  void carve_reserve_if_needed();

  const allocator_config& config_;
  driver& driver_;
  std::unique_ptr<page_toucher> toucher_;  ///< register path only
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, segment_rec> segments_;  ///< driver ranges, reserve included
  // The reserve segment (Note [Reserve segment]).
  std::uintptr_t reserve_base_ = 0;
  std::size_t reserve_size_ = 0;
  std::size_t reserve_used_ = 0;
  bool reserve_tried_ = false;  ///< obtained once (a failed attempt is retried by the next call)
  stat segment_;
  stat reserved_bytes_;
  duration_stat alloc_time_;
  duration_stat free_time_;
};

}  // namespace streampool::host
