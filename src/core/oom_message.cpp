// oom_message.cpp — builds the OOM diagnostic.
//
// Note [OOM message]
// PyTorch's message (spec §2.10) says what was asked and what the device has, then a generic hint.
// Users asked for the figures that decide what to do next, so ours also gives the largest free
// block and the cached bytes per stream, and it states the cause: when the request fits in the
// reserved-but-unallocated memory but no free block is large enough, the memory is there but cut
// into pieces (fragmentation, or free blocks cached for other streams), and we name the keys that
// fix it. When it does not fit, the device (or the cap) is simply full.
#include "core/oom_message.hpp"

#include "core/text_builder.hpp"

#include "core/format.hpp"
#include "streampool/stats.hpp"

namespace streampool::detail {

std::string build_oom_message(const oom_figures& f) {
  detail::text_builder out;
  const std::size_t unallocated = f.reserved > f.allocated ? f.reserved - f.allocated : 0;
  out << "CUDA out of memory. Tried to allocate " << format_size(f.alloc_size);
  if (f.alloc_size != f.requested) out << " (request of " << format_size(f.requested) << ")";
  out << ". GPU " << f.device << " has a total capacity of " << format_size(f.device_total) << " of which "
      << format_size(f.device_free) << " is free. ";
  if (f.allowed != 0) out << format_size(f.allowed) << " allowed (per_process_memory_fraction); ";
  out << "Of the allocated memory " << format_size(f.allocated) << " is allocated by streampool ("
      << f.backend << " backend), ";
  if (f.private_pool_free != 0) {
    out << "with " << format_size(f.private_pool_free) << " cached in private pools (e.g., CUDA Graphs), ";
  }
  out << "and " << format_size(unallocated) << " is reserved by streampool but unallocated. Reserved in total: "
      << format_size(f.reserved) << "; largest free block: " << format_size(f.largest_free_block) << ".";
  if (!f.cached_per_stream.empty()) {
    out << " Cached free bytes per stream:";
    for (const auto& [stream, bytes] : f.cached_per_stream) {
      out << ' ' << format_pointer(stream) << '=' << format_size(bytes);
    }
    out << '.';
  }
  const bool fits_in_unallocated = f.alloc_size <= unallocated;
  if (fits_in_unallocated && f.largest_free_block < f.alloc_size) {
    out << " Fragmentation is the cause: " << format_size(unallocated)
        << " is reserved but unallocated, yet no free block of " << format_size(f.alloc_size)
        << " exists (free memory is split into smaller pieces or cached for other streams).";
    if (!f.expandable_segments) {
      out << " Set STREAMPOOL_ALLOC_CONF=expandable_segments:True to avoid fragmentation";
      out << (f.max_split_size_set ? "." : ", or max_split_size_mb:<MiB> to stop large blocks from being split.");
    } else {
      out << " Call empty_cache() after freeing to return cached pages, or free memory held by other streams.";
    }
  } else {
    out << " The device" << (f.allowed != 0 ? " (or the per-process cap)" : "")
        << " is full: free memory or lower the batch size";
    if (f.allowed != 0) out << ", or raise per_process_memory_fraction";
    out << '.';
  }
  return out.str();
}

}  // namespace streampool::detail
