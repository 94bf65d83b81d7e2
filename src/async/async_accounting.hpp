// async_accounting.hpp — the statistics of one device of the cudaMallocAsync backend, kept from the
// backend's own bookkeeping (every allocation and free passes through it) plus the pool's reserve,
// sampled from its attributes. Not thread-safe: the device mutex guards it. Mappings: see
// Note [Statistics of the cudaMallocAsync backend] and docs/async-backend.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "streampool/stats.hpp"

namespace streampool::async {

/// Requests of at most this many bytes count as "small_pool" (docs/pytorch-compatibility.md §2.5's threshold, applied to the
/// requested size because this backend does not round).
inline constexpr std::size_t async_small_limit = std::size_t{1} << 20;

/// The address range one allocation occupies in the pool: the request rounded up to 512 bytes
/// (measured on an H200 with CUDA 13: consecutive cudaMallocAsync results are 512-byte aligned and
/// a 1-byte request moves the next address by 512).
[[nodiscard]] constexpr std::size_t async_footprint(std::size_t requested) noexcept {
  return (requested + 511) & ~std::size_t{511};
}

class async_accounting {
 public:
  /// A successful malloc_async of `requested` bytes.
  void on_alloc(std::size_t requested) noexcept;
  /// deallocate(): the allocation is no longer the user's (it may still wait for a capture).
  void on_free_requested(std::size_t requested) noexcept;
  /// free_async was issued: the memory is the pool's again.
  void on_free_completed(std::size_t requested) noexcept;
  // Private pools (Note [Private pools of the cudaMallocAsync backend]): a new block is on_alloc.
  /// An idle private block handed out again: allocation and active, no segment, no device call.
  void on_reuse(std::size_t requested) noexcept;
  /// A private block back in its pool (after on_free_requested): active drops, the segment stays.
  void on_idle(std::size_t requested) noexcept;
  /// An idle private block of `block_size` bytes given back to the device: the segment drops.
  void on_segment_release(std::size_t block_size) noexcept;
  void on_retry() noexcept { ++stats_.num_alloc_retries; }
  void on_oom() noexcept { ++stats_.num_ooms; }
  void on_device_synchronize() noexcept { ++stats_.num_sync_all_streams; }
  /// The pool's ReservedMemCurrent / ReservedMemHigh, read now.
  void observe_reserved(std::uint64_t current, std::uint64_t high) noexcept;

  /// Bytes of allocations not yet handed back to the pool (live + deferred frees), by footprint.
  /// This is what per_process_memory_fraction is checked against.
  [[nodiscard]] std::size_t held_bytes() const noexcept {
    return static_cast<std::size_t>(stats_.active_bytes[0].current);
  }
  [[nodiscard]] std::size_t allocated_bytes() const noexcept {
    return static_cast<std::size_t>(stats_.allocated_bytes[0].current);
  }
  [[nodiscard]] std::size_t reserved_bytes() const noexcept {
    return static_cast<std::size_t>(stats_.reserved_bytes[0].current);
  }
  [[nodiscard]] const memory_stats& stats() const noexcept { return stats_; }
  void reset_peak() noexcept { stats_.reset_peak(); }
  void reset_accumulated() noexcept { stats_.reset_accumulated(); }

 private:
  memory_stats stats_;
};

}  // namespace streampool::async
