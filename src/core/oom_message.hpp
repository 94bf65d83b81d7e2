// oom_message.hpp — the out-of-memory diagnostic shared by both backends (see Note [OOM message]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "streampool/driver.hpp"
#include "streampool/graph.hpp"

namespace streampool::core {

/// What a stream-ordered pool backend did with its pool before giving up (oom_figures::pool_trim).
enum class pool_trim : std::uint8_t {
  not_tried,             ///< the pool was not trimmed (e.g. synchronising the device failed)
  trimmed,               ///< the device was synchronised, the pool trimmed, the request retried
  skipped_for_capture,   ///< a capture was underway: synchronising and trimming were illegal
};

/// Everything the message reports. Sizes in bytes.
struct oom_figures {
  int device = 0;
  std::size_t requested = 0;        ///< what the caller asked for
  std::size_t alloc_size = 0;       ///< what the allocator tried to obtain (segment / rounded size)
  std::size_t device_total = 0;
  std::size_t device_free = 0;
  std::size_t allowed = 0;          ///< per-process cap in bytes (0 with cap_set false: no cap)
  /// A per-process cap is set (per_process_memory_fraction < 1), even when `allowed` is 0 bytes
  /// (fraction 0): Note [A cap of 0 bytes] in oom_message.cpp.
  bool cap_set = false;
  std::size_t allocated = 0;        ///< live allocations (rounded)
  std::size_t reserved = 0;         ///< obtained from the device
  std::size_t private_pool_free = 0;  ///< free bytes cached in private (graph) pools
  std::size_t largest_free_block = 0;
  std::vector<std::pair<stream_t, std::size_t>> cached_per_stream;  ///< free bytes per stream
  bool expandable_segments = false;
  bool max_split_size_set = false;
  const char* backend = "native";
  // Stream-ordered pool backends (cudaMallocAsync) only; see Note [OOM advice for a
  // stream-ordered pool]. With stream_ordered_pool false (native) the fields below are ignored.
  bool stream_ordered_pool = false;
  std::size_t pool_unused = 0;        ///< the pool's reserved minus used bytes (what it caches)
  pool_trim pool_trim_state = pool_trim::not_tried;
  bool cap_refused = false;           ///< the per-process cap refused it; the driver was not asked
};

/// "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of ..." followed by
/// the allocator's picture and, when fragmentation is the cause, a sentence that says so and names
/// the keys that help (for a stream-ordered pool: what its cache holds and how to release it).
[[nodiscard]] std::string build_oom_message(const oom_figures& figures);

/// Appended to the OOM message of an allocation into a private pool whose segments come from a
/// segment provider (Note [Pool options] in src/core/allocator.cpp): what the provider can give
/// counts there, not the device's free memory.
[[nodiscard]] std::string provider_oom_note(mempool_id pool, const segment_provider& provider);

}  // namespace streampool::core
