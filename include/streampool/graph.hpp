// streampool/graph.hpp — identifiers and routing for private memory pools used by CUDA graph
// capture (spec §3). Allocations made while a filter of an active begin_allocate_to_pool()
// matches go to that pool; its memory stays reserved while any graph captured into it may replay.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

#include "streampool/driver.hpp"

namespace streampool {

/// Identifier of a private memory pool (spec §3.1). {0,0} means "no pool" (the default pools).
/// User-created ids (create_pool_id) are {0, n}; ids made for a graph without a pool are {n, 0}.
struct mempool_id {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
  friend constexpr bool operator==(mempool_id, mempool_id) = default;
  friend constexpr auto operator<=>(mempool_id, mempool_id) = default;
  [[nodiscard]] constexpr bool is_default() const noexcept { return first == 0 && second == 0; }
};

/// Decides, for the stream of an allocation, whether it goes to the pool being recorded.
/// Called under the allocator's lock: keep it cheap and do not call back into the allocator.
using stream_filter = std::function<bool(stream_t)>;

}  // namespace streampool
