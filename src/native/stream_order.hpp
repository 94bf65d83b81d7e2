// stream_order.hpp — what the cross_stream_reuse policy knows about the order of the streams that
// share one arena (Note [Cross-stream reuse]): the streams (up to 64, one bit each), a ticket per
// free, one fence event per stream, which fences the host saw complete and which ones each stream
// was made to wait for. It decides, for a free block last used by some streams, what a new user
// stream needs before it may touch the block: nothing, or cudaStreamWaitEvent on fences.
// Owned by the shared arena; everything runs under that arena's lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "native/device_context.hpp"
#include "streampool/driver.hpp"
#include "streampool/stats.hpp"

namespace streampool::native {

// Note [Cross-stream reuse]
// PyTorch keeps each stream's free memory for that stream: a block freed on stream A serves only
// allocations on A, since A's kernels that used it may still be running and only A's own order
// makes a new use safe. With two or more streams that is where most of the waste of its best
// config comes from (each stream has its own segments, its own expandable segment, its own free
// pages). cross_stream_reuse:True lets the streams of a device's default pool share one arena, so
// a free block serves any stream, and keeps it safe with events:
//   * Every free gets a ticket (a device-wide counter) and marks the block with the bit of its
//     stream; merged free blocks carry the union of the bits and the larger ticket; a split piece
//     keeps both. An allocated block carries none.
//   * A block whose bits name only the allocating stream B is handed out as today (B's own order
//     covers it): the same-stream cache hit pays one comparison.
//   * Otherwise, for each other stream A in the bits: if the host has already seen A's work up to
//     the block's ticket complete, or B already waits for a fence of A recorded after it, nothing
//     is needed. Else A's fence is used if it was recorded after the ticket (its query may show it
//     complete: no wait), or a new fence is recorded on A (an event from the device's pool), and
//     B is made to wait for it (cudaStreamWaitEvent; B's later work is ordered after everything A
//     had been given when the fence was recorded, which includes every use of the block: the free
//     came after them). The host never waits here.
//   * While a capture is underway none of this runs (an event recorded on, or waited for by, a
//     capturing stream would become part of its graph): a block that would need it is skipped and
//     the allocation takes new memory. Private pools (graph capture) are never shared.
//   * Unmapping pages (expandable segments) needs the work done, not ordered: a moved page's old
//     mapping stays until a query sees its last users' fences complete, and the host waits for
//     them (event synchronize, never a device-wide synchronisation) only where nothing else will
//     do, see Note [Moving pages still in use] in page_moves.cpp.
// The sim checks the rule: tests run multi-stream programs with random completion through its
// hazard checker (every use of a byte range on a stream must be ordered after the last uses on
// other streams) with this policy on.

// Note [Fence checkpoints]
// A fence recorded when a block is needed covers everything its stream has been given so far,
// and in a training loop the host runs far ahead of the device: waiting for such a fence before an
// unmap drains the stream, and ordering a stream after it delays that stream, though the block's
// last use ended long before. So each stream keeps its last few fences (up to 8, oldest first, each with the ticket
// counter at its record), a wait or a query takes the oldest fence that covers the block's ticket,
// and every growth of a shared arena first records a checkpoint fence on each stream that freed
// memory since its newest fence (one cudaEventRecord per such stream, on a path that maps pages
// anyway). A later wait then lasts only until the device reaches the checkpoint after the free,
// and a query (is a moved page's old mapping idle yet?) sees it done sooner. Fences seen complete go back to the device's event pool. A stream that
// refuses the checkpoint record (destroyed since) is skipped: a checkpoint is only an optimisation.

class stream_order {
 public:
  static constexpr std::size_t max_streams = 64;

  explicit stream_order(device_context& device) : device_(&device) {}
  ~stream_order();
  stream_order(const stream_order&) = delete;
  stream_order& operator=(const stream_order&) = delete;

  /// The bit of `stream`, 0 when it has none (add() refused it).
  [[nodiscard]] std::uint64_t bit(stream_t stream) const noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      if (streams_[i].stream == stream) return std::uint64_t{1} << i;
    }
    return 0;
  }
  /// Gives `stream` a bit; false when all 64 are taken (the stream then keeps an arena of its own).
  [[nodiscard]] bool add(stream_t stream);
  /// A free on `stream`: its bit (0 when it has none) and the free's ticket in `ticket`.
  [[nodiscard]] std::uint64_t note_free(stream_t stream, std::uint64_t& ticket) noexcept {
    ticket = ++ticket_;
    for (std::size_t i = 0; i < count_; ++i) {
      if (streams_[i].stream == stream) {
        streams_[i].freed_ticket = ticket;
        return std::uint64_t{1} << i;
      }
    }
    return 0;
  }

  /// Makes `stream`'s next work ordered after the last uses recorded as (`users`, `ticket`) on the
  /// other streams; false when that needs an event while a capture is underway (nothing done).
  /// @throws cuda_error when an event cannot be created, recorded or waited for (nothing handed out)
  [[nodiscard]] bool order_after(std::uint64_t users, std::uint64_t ticket, stream_t stream);
  /// Waits on the host until the work of `users` up to `ticket` is complete (before an unmap).
  /// @throws cuda_error
  void complete(std::uint64_t users, std::uint64_t ticket);
  /// Waits on the host for every stream's work so far (empty_cache, OOM release). @throws cuda_error
  void complete_all();
  /// True when the host sees, without waiting or recording anything, that the work of `users` up
  /// to `ticket` is done (a fence covering it has completed). @throws cuda_error when a query fails
  [[nodiscard]] bool completed(std::uint64_t users, std::uint64_t ticket);
  /// Records a fence on every stream that freed memory since its newest fence (Note [Fence
  /// checkpoints]); a stream that refuses the record (destroyed since) is skipped.
  void checkpoint() noexcept;

  /// Pages unmapped by a growth (Note [Moving free pages]), for the statistics.
  void note_moved_pages(std::size_t pages) noexcept { moved_pages_ += static_cast<std::int64_t>(pages); }
  /// Adds the counters (docs/cross-stream-reuse.md) to `s`; reset_counters() zeroes them.
  void copy_counters(memory_stats& s) const noexcept {
    s.num_cross_stream_reuses = reuses_;
    s.num_cross_stream_waits = waits_;
    s.num_cross_stream_fences = fences_;
    s.num_fence_host_waits = host_waits_;
    s.num_moved_pages = moved_pages_;
  }
  void reset_counters() noexcept { reuses_ = waits_ = fences_ = host_waits_ = moved_pages_ = 0; }

 private:
  static constexpr std::size_t max_fences = 8;

  /// An event recorded on a stream when the ticket counter stood at `ticket`: it completes after
  /// every use of memory freed on that stream with a ticket up to `ticket`.
  struct fence {
    event_t event = nullptr;
    std::uint64_t ticket = 0;
  };
  struct stream_slot {
    stream_t stream = nullptr;
    std::array<fence, max_fences> fences{};  ///< not yet seen complete, oldest first
    std::size_t fence_count = 0;
    std::uint64_t freed_ticket = 0;   ///< the ticket of this stream's newest free
    std::uint64_t done_ticket = 0;    ///< the host saw this stream's work complete up to here
    std::array<std::uint64_t, max_streams> waited{};  ///< waited[a]: this stream waits for a's fence up to it
  };

  /// The oldest fence of `a` covering `ticket`, recording one if none does. @throws cuda_error
  [[nodiscard]] fence fence_for(stream_slot& a, std::uint64_t ticket);
  /// Records a new fence on `a` (the oldest is dropped when all are taken); false if refused.
  [[nodiscard]] drv_result record_fence(stream_slot& a);
  /// The oldest fence of `a` covering `ticket`, or nullptr.
  [[nodiscard]] static const fence* covering(const stream_slot& a, std::uint64_t ticket) noexcept;
  /// True when the host sees `f` complete (then mark_done).
  [[nodiscard]] bool fence_done(stream_slot& a, fence f);
  /// The host saw `a`'s work complete up to `ticket`: done_ticket moves up, older fences go.
  void mark_done(stream_slot& a, std::uint64_t ticket) noexcept;
  [[noreturn]] void fail(const char* what, stream_t stream, const drv_result& result) const;

  device_context* device_;
  std::array<stream_slot, max_streams> streams_{};
  std::size_t count_ = 0;
  std::uint64_t ticket_ = 0;
  std::int64_t reuses_ = 0;
  std::int64_t waits_ = 0;
  std::int64_t fences_ = 0;
  std::int64_t host_waits_ = 0;
  std::int64_t moved_pages_ = 0;
};

}  // namespace streampool::native
