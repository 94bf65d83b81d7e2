// memory_cap.cpp — the limit of the fraction cap (memory_cap.hpp), one rule for both backends.
//
// Note [Memory fraction]
// As in PyTorch's backends, the fraction is a cap enforced by the allocator, not a pool property:
// limit = fraction x the device's total memory, compared with the bytes the device holds (native:
// reserved segments, docs/pytorch-compatibility.md §2.12; cudaMallocAsync: footprints of live
// allocations and deferred frees, plus idle private-pool blocks) before cudaMalloc, a mapping or
// malloc_async is asked. 1.0 means no cap (as in PyTorch before set_memory_fraction): the driver
// decides, and limit() is SIZE_MAX, allowed() 0. The product is computed in double and truncated,
// as PyTorch's native allocator does (static_cast<size_t>(fraction * total)); the two backends
// used to round it differently (double truncation and long double floor), which could differ by a
// byte. The config value applies from the device's first use; set_memory_fraction changes it at
// any time (existing allocations stay).
#include "core/memory_cap.hpp"

#include <limits>

namespace streampool::core {

std::size_t memory_cap::limit() const noexcept {
  const double f = fraction();
  if (f >= 1.0) return std::numeric_limits<std::size_t>::max();  // no cap: the driver decides
  const double limit = f * static_cast<double>(total_memory_);
  if (limit >= static_cast<double>(std::numeric_limits<std::size_t>::max())) {
    return std::numeric_limits<std::size_t>::max();
  }
  return static_cast<std::size_t>(limit);
}

}  // namespace streampool::core
