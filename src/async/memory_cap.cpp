// memory_cap.cpp — the limit of the cudaMallocAsync backend's fraction cap (memory_cap.hpp).
//
// Note [Memory fraction]
// As in PyTorch's backends, the fraction is a cap enforced by the allocator, not a pool property:
// limit = fraction x the device's total memory, compared with the bytes this device's allocations
// hold (footprints of live allocations and deferred frees, plus idle private-pool blocks) before
// malloc_async or a private pool's cudaMalloc is called. 1.0
// means no cap (as in PyTorch before set_memory_fraction): the driver decides. The config value
// applies from the device's first use; set_memory_fraction changes it at any time (existing
// allocations stay).
#include "async/memory_cap.hpp"

#include <cmath>
#include <limits>

namespace streampool::async {

std::size_t memory_cap::limit() const noexcept {
  if (fraction_ >= 1.0) return std::numeric_limits<std::size_t>::max();  // no cap: the driver decides
  const long double limit = static_cast<long double>(fraction_) * static_cast<long double>(total_memory_);
  if (limit >= static_cast<long double>(std::numeric_limits<std::size_t>::max())) {
    return std::numeric_limits<std::size_t>::max();
  }
  return static_cast<std::size_t>(std::floor(limit));
}

}  // namespace streampool::async
