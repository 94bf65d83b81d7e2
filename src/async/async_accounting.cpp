// async_accounting.cpp — see async_accounting.hpp.
//
// Note [Statistics of the cudaMallocAsync backend]
// PyTorch's version of this backend reports three figures read from the pool and zero for the
// rest (docs/pytorch-compatibility.md §4). Here every allocation and free goes through the backend, so the statistics of
// docs/pytorch-compatibility.md §2.14 are kept exactly, with these mappings (also in docs/async-backend.md):
//  - One allocation = one "block" = one "segment": the pool hands out separate address ranges and
//    never shows how it carves them, so the snapshot lists each allocation as its own one-block
//    segment and `segment` counts them (+1 at malloc_async, -1 at free_async), exactly like the
//    snapshot. num_device_alloc / num_device_free count successful malloc_async / free_async calls.
//  - Sizes: allocated_bytes and active_bytes use the footprint (request rounded up to 512 B, the
//    granularity measured on the device); requested_bytes uses the exact request. small_pool vs
//    large_pool is decided by the requested size (<= 1 MiB is small).
//  - allocation / allocated_bytes drop at deallocate(); active / active_bytes / requested_bytes /
//    segment drop when free_async is issued. The two differ only for frees deferred until a capture
//    ends (Note [Deferred frees during capture]), which are "active_pending_free" in the snapshot.
//    A free waiting on record_stream streams is ordered on the device (Note [record_stream by stream
//    wait]) and is the pool's at once, so it is never pending here.
//  - reserved_bytes is the pool's own reserve (ReservedMemCurrent/High), read when stats are asked
//    for, at empty_cache and at OOM; the change since the previous reading is added to
//    allocated/freed, and peak includes ReservedMemHigh, so peaks between readings are not lost.
//    The pool has no small/large split: its reserve counts as large_pool (it reserves in chunks of
//    tens of MiB). With the device's default pool, other users of that pool are included.
//  - Private pools' blocks (Note [Private pools of the cudaMallocAsync backend]) are segments from
//    their cudaMalloc to their cudaFree at release; freeing one (on_idle) or reusing it (on_reuse)
//    leaves the segment, and their bytes are added to the pool's reserve.
//  - inactive_split*, oversize_* and max_split_size are 0: nothing is split and max_split_size_mb
//    is ignored by this backend. num_sync_all_streams counts device synchronisations (empty_cache
//    and the OOM retry).
#include "async/async_accounting.hpp"

namespace streampool::async {
namespace {

constexpr std::size_t all_index = static_cast<std::size_t>(stat_pool::all);

std::size_t kind_index(std::size_t requested) noexcept {
  return static_cast<std::size_t>(requested <= async_small_limit ? stat_pool::small_pool : stat_pool::large_pool);
}

void increase(stat_array& array, std::size_t kind, std::int64_t amount) noexcept {
  array[all_index].increase(amount);
  array[kind].increase(amount);
}

void decrease(stat_array& array, std::size_t kind, std::int64_t amount) noexcept {
  array[all_index].decrease(amount);
  array[kind].decrease(amount);
}

}  // namespace

void async_accounting::on_alloc(std::size_t requested) noexcept {
  const std::size_t kind = kind_index(requested);
  const auto footprint = static_cast<std::int64_t>(async_footprint(requested));
  increase(stats_.allocation, kind, 1);
  increase(stats_.active, kind, 1);
  increase(stats_.segment, kind, 1);
  increase(stats_.allocated_bytes, kind, footprint);
  increase(stats_.active_bytes, kind, footprint);
  increase(stats_.requested_bytes, kind, static_cast<std::int64_t>(requested));
  ++stats_.num_device_alloc;
}

void async_accounting::on_free_requested(std::size_t requested) noexcept {
  const std::size_t kind = kind_index(requested);
  decrease(stats_.allocation, kind, 1);
  decrease(stats_.allocated_bytes, kind, static_cast<std::int64_t>(async_footprint(requested)));
}

void async_accounting::on_free_completed(std::size_t requested) noexcept {
  const std::size_t kind = kind_index(requested);
  decrease(stats_.active, kind, 1);
  decrease(stats_.segment, kind, 1);
  decrease(stats_.active_bytes, kind, static_cast<std::int64_t>(async_footprint(requested)));
  decrease(stats_.requested_bytes, kind, static_cast<std::int64_t>(requested));
  ++stats_.num_device_free;
}

void async_accounting::on_reuse(std::size_t requested) noexcept {
  const std::size_t kind = kind_index(requested);
  const auto footprint = static_cast<std::int64_t>(async_footprint(requested));
  increase(stats_.allocation, kind, 1);
  increase(stats_.active, kind, 1);
  increase(stats_.allocated_bytes, kind, footprint);
  increase(stats_.active_bytes, kind, footprint);
  increase(stats_.requested_bytes, kind, static_cast<std::int64_t>(requested));
}

void async_accounting::on_idle(std::size_t requested) noexcept {
  const std::size_t kind = kind_index(requested);
  decrease(stats_.active, kind, 1);
  decrease(stats_.active_bytes, kind, static_cast<std::int64_t>(async_footprint(requested)));
  decrease(stats_.requested_bytes, kind, static_cast<std::int64_t>(requested));
}

void async_accounting::on_segment_release(std::size_t block_size) noexcept {
  decrease(stats_.segment, kind_index(block_size), 1);
  ++stats_.num_device_free;
}

void async_accounting::observe_reserved(std::uint64_t current, std::uint64_t high) noexcept {
  const auto large = static_cast<std::size_t>(stat_pool::large_pool);
  const auto now = static_cast<std::int64_t>(current);
  const std::int64_t delta = now - stats_.reserved_bytes[all_index].current;
  if (delta > 0) increase(stats_.reserved_bytes, large, delta);
  if (delta < 0) decrease(stats_.reserved_bytes, large, -delta);
  const auto pool_high = static_cast<std::int64_t>(high);
  for (const std::size_t index : {all_index, large}) {
    if (pool_high > stats_.reserved_bytes[index].peak) stats_.reserved_bytes[index].peak = pool_high;
  }
}

}  // namespace streampool::async
