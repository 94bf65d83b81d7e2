// oom_message.cpp — builds the OOM diagnostic.
//
// Note [OOM message]
// PyTorch's message (docs/pytorch-compatibility.md §2.10) says what was asked and what the device has, then a generic hint.
// Users asked for the figures that decide what to do next, so ours also gives the largest free
// block and the cached bytes per stream, and it states the cause: when the request fits in the
// reserved-but-unallocated memory but no free block is large enough, the memory is there but cut
// into pieces (fragmentation, or free blocks cached for other streams), and we name the keys that
// fix it. "The device is full" is said only when it is true; the native causes, in order:
//  0. a per-process cap of 0 bytes (Note [A cap of 0 bytes]): nothing can fit, the fraction is the fix;
//  1. too large: the request exceeds the device's total capacity (or the per-process cap): no
//     freeing or setting can make it fit, so the message says that, not "full";
//  2. fragmentation: it fits in the reserved-but-unallocated memory, but no free block is large
//     enough (the keys that fix it are named);
//  3. the cap: the device has the memory free, but the per-process cap refuses it;
//  3b. not full, other stream: a free block large enough is cached, but for another stream (or
//     in a private pool), and could not be released (during a capture nothing is released);
//  4. not full, split: the device's free memory plus the reserved-but-unallocated memory would
//     hold it, but neither alone does: the cached memory lies in segments that also hold live
//     allocations (or is cached for other streams / private pools), so it cannot be released to
//     make one new segment; expandable segments map pages and avoid this;
//  5. full: none of the above; memory held outside streampool (other allocators, processes) is
//     named when it alone would hold the request.
// Each branch has a test with its figures (tests/unit/core/core_format_test.cpp).
//
// Note [OOM advice for a stream-ordered pool]
// The cudaMallocAsync backend's reserve is the driver's pool: it does not split blocks, so
// native's diagnosis (a free block too small, fixed by expandable_segments / max_split_size_mb)
// would be wrong there. What matters is the pool's cache — reserved minus used bytes, which the
// backend reads from the pool (ReservedMemCurrent - UsedMemCurrent). When the cache alone could
// hold the request, the message says so, and what to do depends on what the backend already did:
// the pool was trimmed after a device synchronise and it still failed -> the cache sits in pieces
// of chunks that live allocations keep reserved (fragmentation of the pool; free long-lived
// allocations, or use native with expandable segments); a capture was underway, so nothing could
// be trimmed -> call empty_cache() outside the capture; the pool was not trimmed -> empty_cache().
// When the cache cannot hold it, the device is full; the message then names the memory held
// outside this pool (other pools, allocators or processes), which this allocator cannot release:
// their own empty_cache() / cudaMemPoolTrimTo, or a lower release threshold on their pools,
// returns it. A request refused by the per-process cap never reached the driver, so the pool's
// cache does not matter for it: the usual "full" advice applies.
#include "core/oom_message.hpp"

#include <algorithm>

#include "core/text_builder.hpp"

#include "core/format.hpp"
#include "streampool/stats.hpp"

namespace streampool::core {
namespace {

// Note [A cap of 0 bytes]
// `allowed` was once the only sign of a cap, 0 meaning "none"; per_process_memory_fraction:0 (a
// valid value, PyTorch's range is [0, 1]) caps the process at 0 bytes, so the message took it for
// no cap and, the device being free, said "the device is not full" and recommended
// expandable_segments. `cap_set` says a cap exists whatever its size; a cap of 0 bytes is
// cause 0, before all others: nothing can be allocated, and only the fraction can change that.
bool capped(const oom_figures& f) { return f.cap_set || f.allowed != 0; }

/// Cause 0 (Note [A cap of 0 bytes]): says so and returns true when the cap allows nothing.
bool zero_cap(text_builder& out, const oom_figures& f) {
  if (!capped(f) || f.allowed != 0) return false;
  out << " The per-process cap is 0 bytes (per_process_memory_fraction is 0, or so small that a fraction of "
      << format_size(f.device_total) << " rounds to 0): it allows no allocation at all, whatever the device "
      << "holds; raise per_process_memory_fraction (a fraction of the device's total memory in [0.0, 1.0]).";
  return true;
}

/// The device's capacity, or the per-process cap when it is lower.
std::size_t limit_of(const oom_figures& f) {
  return capped(f) ? std::min(f.allowed, f.device_total) : f.device_total;
}

/// Cause 1 of Note [OOM message]: says so and returns true when the request exceeds the limit.
bool too_large(text_builder& out, const oom_figures& f) {
  if (zero_cap(out, f)) return true;
  const std::size_t limit = limit_of(f);
  if (f.alloc_size <= limit) return false;
  out << " The request is larger than " << (limit < f.device_total ? "the per-process cap" : "the device's total capacity")
      << " (" << format_size(limit) << "): no amount of freed memory or allocator setting makes it fit; "
      << "split the work into smaller tensors or a smaller batch"
      << (limit < f.device_total ? ", or raise per_process_memory_fraction." : ".");
  return true;
}

/// The cause sentence for a stream-ordered pool (Note [OOM advice for a stream-ordered pool]).
void pool_advice(text_builder& out, const oom_figures& f) {
  if (too_large(out, f)) return;
  if (!f.cap_refused && f.alloc_size <= f.pool_unused) {
    switch (f.pool_trim_state) {
      case pool_trim::trimmed:
        out << " The memory pool still caches " << format_size(f.pool_unused)
            << " (reserved but unused) after it was trimmed, enough for this request in total but in pieces of "
               "the pool's reserve that live allocations keep, none large enough (fragmentation of the pool): "
               "free long-lived allocations so that their chunks can be released, or use backend:native with "
               "expandable_segments:True.";
        return;
      case pool_trim::skipped_for_capture:
        out << " The memory pool caches " << format_size(f.pool_unused)
            << " (reserved but unused), enough for this request, but it cannot be trimmed while a capture is "
               "underway: call empty_cache() before beginning the capture (or after it ends) to return the "
               "pool's cache to the device.";
        return;
      case pool_trim::not_tried:
        out << " The memory pool caches " << format_size(f.pool_unused)
            << " (reserved but unused), enough for this request: call empty_cache() to trim the pool and "
               "retry.";
        return;
    }
  }
  out << " The device" << (capped(f) ? " (or the per-process cap)" : "")
      << " is full: free memory or lower the batch size";
  if (capped(f)) out << ", or raise per_process_memory_fraction";
  out << '.';
  const std::size_t used = f.device_total > f.device_free ? f.device_total - f.device_free : 0;
  const std::size_t elsewhere = used > f.reserved ? used - f.reserved : 0;
  if (!f.cap_refused && elsewhere >= f.alloc_size) {
    out << ' ' << format_size(elsewhere)
        << " of the device's memory is held outside this allocator's pool (other pools, allocators or "
           "processes); what they cache is returned only by their own empty_cache() or cudaMemPoolTrimTo, or "
           "by a lower release threshold on their pools.";
  }
}

}  // namespace

std::string build_oom_message(const oom_figures& f) {
  core::text_builder out;
  const std::size_t unallocated = f.reserved > f.allocated ? f.reserved - f.allocated : 0;
  out << "CUDA out of memory. Tried to allocate " << format_size(f.alloc_size);
  if (f.alloc_size != f.requested) out << " (request of " << format_size(f.requested) << ")";
  out << ". GPU " << f.device << " has a total capacity of " << format_size(f.device_total) << " of which "
      << format_size(f.device_free) << " is free. ";
  if (capped(f)) out << format_size(f.allowed) << " allowed (per_process_memory_fraction); ";
  out << "Of the allocated memory " << format_size(f.allocated) << " is allocated by streampool ("
      << f.backend << " backend), ";
  if (f.private_pool_free != 0) {
    out << "with " << format_size(f.private_pool_free) << " cached in private pools (e.g., CUDA Graphs), ";
  }
  out << "and " << format_size(unallocated) << " is reserved by streampool but unallocated. Reserved in total: "
      << format_size(f.reserved);
  // A stream-ordered pool does not report its largest free range: no figure rather than a guess.
  if (!f.stream_ordered_pool) out << "; largest free block: " << format_size(f.largest_free_block);
  out << '.';
  if (!f.cached_per_stream.empty()) {
    out << " Cached free bytes per stream:";
    for (const auto& [stream, bytes] : f.cached_per_stream) {
      out << ' ' << format_pointer(stream) << '=' << format_size(bytes);
    }
    out << '.';
  }
  if (f.stream_ordered_pool) {
    pool_advice(out, f);
    return out.str();
  }
  const bool fits_in_unallocated = f.alloc_size <= unallocated;
  const std::size_t used = f.device_total > f.device_free ? f.device_total - f.device_free : 0;
  const std::size_t elsewhere = used > f.reserved ? used - f.reserved : 0;
  if (too_large(out, f)) {
    // cause 1
  } else if (fits_in_unallocated && f.largest_free_block < f.alloc_size) {
    out << " Fragmentation is the cause: " << format_size(unallocated)
        << " is reserved but unallocated, yet no free block of " << format_size(f.alloc_size)
        << " exists (free memory is split into smaller pieces or cached for other streams).";
    if (!f.expandable_segments) {
      out << " Set STREAMPOOL_ALLOC_CONF=expandable_segments:True to avoid fragmentation";
      out << (f.max_split_size_set ? "." : ", or max_split_size_mb:<MiB> to stop large blocks from being split.");
    } else {
      out << " Call empty_cache() after freeing to return cached pages, or free memory held by other streams.";
    }
  } else if (capped(f) && f.reserved + f.alloc_size > f.allowed && f.device_free >= f.alloc_size) {
    out << " The per-process cap is the limit, not the device: " << format_size(f.device_free)
        << " is free on the device, but reserving " << format_size(f.alloc_size) << " more would exceed the "
        << format_size(f.allowed) << " allowed: raise per_process_memory_fraction, or free memory.";
  } else if (fits_in_unallocated) {
    out << " The device is not full: a free block of " << format_size(f.largest_free_block)
        << " is cached, but for another stream (a block is reused only on the stream it was allocated on)"
        << (f.private_pool_free != 0 ? " or in a private pool" : "")
        << ", and it could not be released for this request: call empty_cache() outside a capture to return "
           "cached blocks to the device, or allocate on the stream that freed them.";
  } else if (f.device_free + unallocated >= f.alloc_size) {
    out << " The device is not full: its " << format_size(f.device_free) << " free and the "
        << format_size(unallocated) << " reserved but unallocated would hold the request together, but neither "
        << "alone does, and the unallocated memory cannot be released to make a new segment (it lies in "
        << "segments that also hold live allocations, or is cached for other streams"
        << (f.private_pool_free != 0 ? " or private pools" : "") << ").";
    if (!f.expandable_segments) {
      out << " Set STREAMPOOL_ALLOC_CONF=expandable_segments:True (segments grow page by page, so free pages "
             "anywhere can serve it), or free long-lived allocations.";
    } else {
      out << " Free long-lived allocations, or call empty_cache() after synchronising the other streams.";
    }
  } else {
    out << " The device" << (capped(f) ? " (or the per-process cap)" : "")
        << " is full: free memory or lower the batch size";
    if (capped(f)) out << ", or raise per_process_memory_fraction";
    out << '.';
    if (elsewhere >= f.alloc_size) {
      out << ' ' << format_size(elsewhere)
          << " of the device's memory is used outside streampool (other allocators or processes).";
    }
  }
  return out.str();
}

std::string provider_oom_note(mempool_id pool, const segment_provider& provider) {
  return " Private pool {" + std::to_string(pool.first) + ", " + std::to_string(pool.second) +
         "} gets its segments from segment provider '" + provider.name +
         "' (a MemPool with an allocator of its own), which had none to give: the memory that allocator can "
         "hand out counts here, not the device's free memory.";
}

}  // namespace streampool::core
