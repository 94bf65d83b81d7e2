// oom_message.hpp — the out-of-memory diagnostic shared by both backends (see Note [OOM message]).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "streampool/driver.hpp"

namespace streampool::detail {

/// Everything the message reports. Sizes in bytes.
struct oom_figures {
  int device = 0;
  std::size_t requested = 0;        ///< what the caller asked for
  std::size_t alloc_size = 0;       ///< what the allocator tried to obtain (segment / rounded size)
  std::size_t device_total = 0;
  std::size_t device_free = 0;
  std::size_t allowed = 0;          ///< per-process cap in bytes; 0 = no cap set
  std::size_t allocated = 0;        ///< live allocations (rounded)
  std::size_t reserved = 0;         ///< obtained from the device
  std::size_t private_pool_free = 0;  ///< free bytes cached in private (graph) pools
  std::size_t largest_free_block = 0;
  std::vector<std::pair<stream_t, std::size_t>> cached_per_stream;  ///< free bytes per stream
  bool expandable_segments = false;
  bool max_split_size_set = false;
  const char* backend = "native";
};

/// "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of ..." followed by
/// the allocator's picture and, when fragmentation is the cause, a sentence that says so and names
/// the keys that help.
[[nodiscard]] std::string build_oom_message(const oom_figures& figures);

}  // namespace streampool::detail
